#!/usr/bin/env python3
"""TAP test: the generated parts of docs/reference/ are what the code says
(scripts/gen-docs-reference.py).

- docs/reference/tools.md: each tool's --help block equals what the built
  tool prints (a tool this build lacks is skipped with the reason);
- docs/reference/environment.md: every environment variable the code reads
  or sets (src/, tools/, perf/, python/, scripts/, examples/) is in one of
  its tables, every variable of its tables but the last is read or set by
  the code, and every one of the last table ("Other libraries' ...")
  appears in the tree outside docs/.

Self-tests: a --help block changed by one character, and an environment
list with a variable dropped and one invented, must fail."""

import difflib
import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("NSP_TOP_SRCDIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "tests", "planner"))
import taplib as tap  # noqa: E402  (tests/planner/taplib.py: numbered TAP lines)
BUILD = os.environ.get("NSP_TOP_BUILDDIR") or os.path.join(SRC, "build")
OTHER = "Other libraries"


def check(cond, desc, diag=()):
    """One TAP line; diag: the lines to print on failure."""
    return tap.ok(cond, desc, "\n".join(diag))


def load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(SRC, "scripts", file))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def documented(text):
    """(names in the tables read by the code, names in the last table)."""
    mine, other = set(), set()
    section = ""
    for line in text.split("\n"):
        if line.startswith("## "):
            section = line
        if not line.startswith("| `"):
            continue
        first = line.split("|")[1]
        names = set(re.findall(r"`([A-Z][A-Za-z0-9_]*)`", first))
        (other if OTHER in section else mine).update(names)
    return mine, other


def env_problems(found, mine, other, tree_text):
    probs = ["%s (read in %s) is not in docs/reference/environment.md"
             % (v, ", ".join(sorted(set(found[v])))) for v in sorted(found)
             if v not in mine and v not in other]
    probs += ["%s is documented but no code reads or sets it" % v
              for v in sorted(mine - set(found))]
    probs += ["%s (other libraries) appears nowhere in the tree outside docs/" % v
              for v in sorted(other) if v not in found and v not in tree_text]
    return probs


def tree_text():
    """Every text file outside docs/, .git and build trees, concatenated."""
    parts = []
    for root, dirs, files in os.walk(SRC):
        dirs[:] = [d for d in dirs if d not in (".git", ".venv", "docs", "out", "autom4te.cache")
                   and not d.startswith(("build", "_build"))]
        for f in files:
            if root == SRC and f == "README.md":
                continue
            try:
                with open(os.path.join(root, f), encoding="utf-8") as fh:
                    parts.append(fh.read())
            except (UnicodeDecodeError, OSError):
                pass
    return "\n".join(parts)


def check_tools(gen):
    doc_path = os.path.join(SRC, "docs", "reference", "tools.md")
    with open(doc_path, encoding="utf-8") as f:
        doc = f.read()
    new, report = gen.regenerate(doc, SRC, BUILD)
    status = dict(report)
    for name, _ in gen.TOOLS:
        desc = "docs/reference/tools.md: %s --help is what the tool prints" % name
        st = status.get(name)
        if st == "not built":
            tap.skip(desc, "%s is not built in %s" % (name, BUILD))
        elif st == "same":
            check(True, desc)
        else:
            diag = [st or "no block"]
            if st == "differs":
                old = gen.blocks(doc)[name][2] or ""
                mine = gen.blocks(new)[name][2] or ""
                diag += list(difflib.unified_diff(old.splitlines(), mine.splitlines(),
                                                  "docs/reference/tools.md", name + " --help",
                                                  lineterm=""))
            check(False, desc + " (scripts/gen-docs-reference.py --write updates it)", diag)
    # self-test: the committed text with one character changed in plan_check's block
    mark = gen.BEGIN % "plan_check.py"
    i = doc.find(mark)
    j = doc.find("usage:", i)
    if i < 0 or j < 0:
        check(False, "self-test: plan_check.py's block is there to change", [])
        return
    broken = doc[:j] + "Usage:" + doc[j + len("usage:"):]
    _, rep = gen.regenerate(broken, SRC, BUILD)
    check(dict(rep).get("plan_check.py") == "differs",
       "self-test: a --help block changed by one character is found", [str(rep)])


def check_env(gen):
    with open(os.path.join(SRC, "docs", "reference", "environment.md"), encoding="utf-8") as f:
        mine, other = documented(f.read())
    found = gen.env_vars(SRC)
    text = tree_text()
    probs = env_problems(found, mine, other, text)
    check(len(found) > 40 and not probs,
       "docs/reference/environment.md lists every variable the code reads, and only those "
       "(%d found in the code)" % len(found), probs)
    some = "NSPCOMM_TIMEOUT"
    probs = env_problems(found, mine - {some}, other, text)
    check(any(p.startswith(some) for p in probs),
       "self-test: a variable the code reads but the docs lack is found", probs)
    probs = env_problems(found, mine | {"NSPCOMM_NO_SUCH_VARIABLE"}, other, text)
    check(any(p.startswith("NSPCOMM_NO_SUCH_VARIABLE") for p in probs),
       "self-test: a documented variable no code reads is found", probs)


def main():
    gen = load("gen_docs_reference", "gen-docs-reference.py")
    check_tools(gen)
    check_env(gen)
    tap.plan()
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
