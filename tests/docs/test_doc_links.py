#!/usr/bin/env python3
"""TAP test: the README's and docs/'s references resolve
(scripts/check-doc-links.py), every command of the README's sh blocks
exists, every docs file stays under 500 lines and opens with a paragraph,
and the checker itself fails on a bad link, a bad anchor, a missing file
named in code, a missing design.md section and a missing command (a tree
made for the purpose)."""

import importlib.util
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("NSP_TOP_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "tests", "planner"))
import taplib as tap  # noqa: E402  (tests/planner/taplib.py: numbered TAP lines)
BUILD = os.environ.get("NSP_TOP_BUILDDIR") or os.path.join(SRC, "build")
MAX_LINES = 500
# Paths of the fixture, spelt so that the checker run on this tree does not
# read them as references of this tree.
DOCS = "docs"
DESIGN = "design" + ".md"


def check(cond, desc, diag=()):
    """One TAP line; diag: the lines to print on failure."""
    return tap.ok(cond, desc, "\n".join(diag))


def load_checker():
    path = os.path.join(SRC, "scripts", "check-doc-links.py")
    spec = importlib.util.spec_from_file_location("check_doc_links", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def fixture(root, good):
    """A small tree: README.md, docs/ (design.md, a.md, b.md), scripts/,
    a source file, a build tree. good=False breaks one thing of each kind."""
    write(root, DOCS + "/" + DESIGN, "# design\n\n## §1. One\n\n### §1.1 Sub\n")
    write(root, DOCS + "/b.md", "# B\n\n## 1. Some `code` heading\n\n## Twice\n\n## Twice\n")
    link = "[ok](b.md#1-some-code-heading) [dup](b.md#twice-1) [top](../README.md)"
    bad = " [x](b.md#nope) [y](missing.md)" if not good else ""
    write(root, DOCS + "/a.md", "# A\n\nSee %s%s.\n\n```\n[not a link](nowhere.md)\n```\n"
          % (link, bad))
    write(root, "scripts/run.sh", "#!/bin/sh\n")
    write(root, "build/perf/tool", "")
    mention = "%s/a.md and %s/%s §1.1" % (DOCS, DOCS, DESIGN)
    if not good:
        mention += "; %s/gone.md, %s §9" % (DOCS, DESIGN)
    write(root, "src/x.c", "/* see %s */\n" % mention)
    cmds = "bash scripts/run.sh\nbuild/perf/tool --flag   # a comment\n"
    if not good:
        cmds += "bash scripts/missing.sh\nbuild/perf/none\nfrobnicate now\n"
    write(root, "README.md", "# R\n\n[docs](%s/a.md)\n\n```sh\n%s```\n" % (DOCS, cmds))


def self_test(chk):
    with tempfile.TemporaryDirectory() as root:
        fixture(root, good=True)
        res = chk.check_all(root, os.path.join(root, "build"))
        probs = [p for v in res.values() for p in v]
        check(not probs, "self-test: a tree whose references all resolve passes", probs)
    with tempfile.TemporaryDirectory() as root:
        fixture(root, good=False)
        res = chk.check_all(root, os.path.join(root, "build"))
        links, mentions, cmds = res["links"], res["mentions"], res["commands"]
        check(any("b.md#nope" in p and "no heading" in p for p in links),
           "self-test: a link to a missing anchor fails", links)
        check(any("missing.md" in p and "no such file" in p for p in links),
           "self-test: a link to a missing file fails", links)
        check(not any("nowhere.md" in p for p in links),
           "self-test: a link inside a code block is not checked", links)
        check(any(DOCS + "/gone.md" in p for p in mentions),
           "self-test: a missing docs file named in code fails", mentions)
        check(any("§9" in p for p in mentions),
           "self-test: a missing design.md section fails", mentions)
        check(any("scripts/missing.sh" in p for p in cmds) and any("build/perf/none" in p for p in cmds)
           and any("frobnicate" in p for p in cmds),
           "self-test: README commands that do not exist fail", cmds)
    slugs = {}
    got = [chk.slug(h, slugs) for h in ("1. Calling the planner from C", "`nsp_sim`",
                                         "megatron (Megatron-Core's dynamic context parallelism)",
                                         "Twice", "Twice", "Exit status and bad input")]
    want = ["1-calling-the-planner-from-c", "nsp_sim",
            "megatron-megatron-cores-dynamic-context-parallelism", "twice", "twice-1",
            "exit-status-and-bad-input"]
    check(got == want, "self-test: anchors follow GitHub's rules", ["got %s" % got, "want %s" % want])


def doc_shape():
    bad_len, bad_open = [], []
    for root, _, files in os.walk(os.path.join(SRC, "docs")):
        for f in sorted(files):
            if not f.endswith(".md"):
                continue
            path = os.path.join(root, f)
            with open(path, encoding="utf-8") as fh:
                lines = fh.read().split("\n")
            rel = os.path.relpath(path, SRC)
            if len(lines) > MAX_LINES + 1:
                bad_len.append("%s: %d lines" % (rel, len(lines) - 1))
            body = [l for l in lines[1:] if l.strip()]
            if not lines[0].startswith("# ") or not body or body[0].startswith(("#", "|", "```", "-")):
                bad_open.append("%s: no title and opening paragraph" % rel)
    check(not bad_len, "every file of docs/ has at most %d lines" % MAX_LINES, bad_len)
    check(not bad_open, "every file of docs/ opens with a title and a paragraph", bad_open)


def main():
    chk = load_checker()
    self_test(chk)
    res = chk.check_all(SRC, BUILD)
    check(not res["links"], "every relative link of README.md and docs/ resolves (files and anchors)",
       res["links"])
    check(not res["mentions"], "every docs/ path and design.md section named in the tree exists",
       res["mentions"])
    check(not res["commands"], "every command of the README's sh blocks exists (tree and build)",
       res["commands"])
    doc_shape()
    tap.plan()
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
