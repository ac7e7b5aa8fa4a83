# tests/docs: the README and the manual (docs/) against the tree.
# test_doc_links.py: every relative link and anchor of README.md and docs/
# resolves, every docs/ path named in the tree exists, every README command
# exists, no docs file over 500 lines (scripts/check-doc-links.py; with a
# self-test on a tree of broken references).
# test_docs_reference.py: the tools' --help blocks of docs/reference/tools.md
# equal the built tools' output, and docs/reference/environment.md lists
# exactly the environment variables the code reads (scripts/gen-docs-reference.py).
TESTS += tests/docs/test_doc_links.py tests/docs/test_docs_reference.py
EXTRA_DIST += tests/docs/test_doc_links.py tests/docs/test_docs_reference.py
