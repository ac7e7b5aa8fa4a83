#!/usr/bin/env python3
"""Do the README's and the manual's references resolve?

  scripts/check-doc-links.py [--top DIR] [--build DIR]

Checks, and prints one line per problem (exit 1 if any):

  links     every relative link of README.md and docs/**/*.md ([text](path),
            [text](path#anchor), [text](#anchor), reference definitions)
            names a file or folder that exists, and its #anchor a heading of
            that Markdown file under GitHub's rules (lowercase; punctuation
            but '-' and '_' dropped; spaces to '-'; a repeated heading gets
            -1, -2, ...) or an <a id=...>/<a name=...>;
  mentions  every path under docs/ ending in .md named anywhere in the source tree (code
            comments, help texts, scripts, tests, docstrings) exists, and
            every "design.md §N" names a section of docs/design.md;
  commands  every command of the README's ```sh blocks exists: its program
            is a known command or a path of the tree (build/... in the build
            tree), and every argument that names a path of the tree exists.

Links and mentions inside fenced code blocks and `code spans` are not
links; mentions are read everywhere. Python 3, standard library only.
"""

import argparse
import os
import re
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Programs a README command may start with besides paths of the tree.
KNOWN_COMMANDS = {"bash", "sh", "python3", "torchrun", "mpirun", "srun", "make", "cd",
                  "export", "pip", "sudo", "cc", "git", "env"}
# First components of tree paths an argument may name.
TREE_ROOTS = ("scripts/", "tools/", "perf/", "examples/", "data/", "python/", "tests/",
              "docs/", "include/", "src/", "build/", ".ci/")
SKIP_DIRS = {".git", ".venv", "out", "autom4te.cache", "node_modules", "__pycache__"}
# Files autotools generates in the source tree (from the local.mk files).
GENERATED = {"Makefile.in", "configure", "aclocal.m4", "config.h.in"}

FENCE = re.compile(r"^(\s*)(```+|~~~+)(.*)$")
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.I)
MENTION = re.compile(r"(?<![A-Za-z0-9_./-])(docs/[A-Za-z0-9_./-]*?\.md)(?![A-Za-z0-9_])")
DESIGN_SECTION = re.compile(r"design\.md\W{0,4}§\s?(\d+(?:\.\d+)*)")


def split_fences(text):
    """[(is_code, lang, [(lineno, line)])] blocks of a Markdown text, in order
    (the fence lines themselves belong to no block)."""
    out, cur, code, lang, fence = [], [], False, "", None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if m and not code:
            out.append((False, "", cur))
            cur, code, lang, fence = [], True, m.group(3).strip().lower(), m.group(2)
            continue
        if m and code and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence) \
                and not m.group(3).strip():
            out.append((True, lang, cur))
            cur, code, lang, fence = [], False, "", None
            continue
        cur.append((n, line))
    out.append((code, lang, cur))
    return out


def strip_code_spans(line):
    return re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line)


def slug(heading, seen):
    """GitHub's anchor of a heading's text (github-slugger), made unique."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # links: their text
    text = re.sub(r"<[^>]+>", "", text)                           # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text, flags=re.UNICODE)
    text = text.replace(" ", "-")
    base, n = text, seen.get(text, 0)
    if n:
        text = "%s-%d" % (base, n)
    seen[base] = n + 1
    return text


_anchor_cache = {}


def anchors(path):
    """The anchors of a Markdown file: its headings' slugs and HTML ids."""
    if path in _anchor_cache:
        return _anchor_cache[path]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    seen, out = {}, set()
    for code, _, lines in split_fences(text):
        if code:
            continue
        for _, line in lines:
            m = re.match(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                out.add(slug(m.group(2), seen))
            out.update(HTML_ANCHOR.findall(line))
    _anchor_cache[path] = out
    return out


def markdown_files(top):
    files = [os.path.join(top, "README.md")]
    for root, dirs, names in os.walk(os.path.join(top, "docs")):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in files if os.path.exists(f)]


def check_links(top):
    problems = []
    for path in markdown_files(top):
        rel = os.path.relpath(path, top)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for code, _, lines in split_fences(text):
            if code:
                continue
            for lineno, line in lines:
                plain = strip_code_spans(line)
                targets = [m.group(2) for m in LINK.finditer(plain)]
                m = REFDEF.match(plain)
                if m:
                    targets.append(m.group(1))
                for t in targets:
                    why = check_target(path, t)
                    if why:
                        problems.append("%s:%d: link %s: %s" % (rel, lineno, t, why))
    return problems


def check_target(src, target):
    if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
        return None
    path, _, frag = target.partition("#")
    dest = os.path.normpath(os.path.join(os.path.dirname(src), path)) if path else src
    if not os.path.exists(dest):
        return "no such file or folder"
    if frag:
        if not dest.endswith(".md") or os.path.isdir(dest):
            return "an anchor into something that is not a Markdown file"
        if frag not in anchors(dest):
            return "no heading with anchor #%s in %s" % (frag, os.path.basename(dest))
    return None


def source_files(top, build):
    skip = {os.path.realpath(build)} if build else set()
    for root, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")
                         and not d.startswith("_build")
                         and os.path.realpath(os.path.join(root, d)) not in skip)
        for n in sorted(names):
            if n not in GENERATED:
                yield os.path.join(root, n)


def check_mentions(top, build):
    problems = []
    design = os.path.join(top, "docs", "design.md")
    sections = set()
    if os.path.exists(design):
        with open(design, encoding="utf-8") as f:
            sections = set(re.findall(r"(?m)^#{2,4} §(\d+(?:\.\d+)*)\.?\s", f.read()))
    for path in source_files(top, build):
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        rel = os.path.relpath(path, top)
        for n, line in enumerate(text.split("\n"), 1):
            for m in MENTION.finditer(line):
                if not os.path.exists(os.path.join(top, m.group(1))):
                    problems.append("%s:%d: names %s, which does not exist" % (rel, n, m.group(1)))
            for m in DESIGN_SECTION.finditer(line):
                if m.group(1) not in sections:
                    problems.append("%s:%d: docs/design.md has no §%s" % (rel, n, m.group(1)))
    return problems


def shell_commands(lines):
    """The simple commands of a block: continuation lines joined, comments
    dropped, split at ; && || |."""
    joined, cur = [], ""
    for _, line in lines:
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        joined.append(cur + line)
        cur = ""
    if cur:
        joined.append(cur)
    out = []
    for line in joined:
        line = re.sub(r"(^|\s)#.*$", "", line)
        for part in re.split(r"\s*(?:;|&&|\|\||\|)\s*", line):
            words = part.split()
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                words.pop(0)
            if words:
                out.append(words)
    return out


def check_commands(top, build):
    problems = []
    readme = os.path.join(top, "README.md")
    if not os.path.exists(readme):
        return ["README.md: missing"]
    with open(readme, encoding="utf-8") as f:
        blocks = split_fences(f.read())

    def exists(word):
        word = word.rstrip(",;")
        if word.startswith("build/"):
            return os.path.exists(os.path.join(build, word[len("build/"):]))
        return os.path.exists(os.path.join(top, word))

    for code, lang, lines in blocks:
        if not code or lang not in ("sh", "bash", "shell"):
            continue
        for words in shell_commands(lines):
            prog = words[0]
            if "/" in prog:
                if not exists(prog):
                    problems.append("README.md: command %s: %s does not exist" % (" ".join(words), prog))
            elif prog not in KNOWN_COMMANDS:
                problems.append("README.md: command %s: %s is not a known command" % (" ".join(words), prog))
            for w in words[1:]:
                if w.startswith(TREE_ROOTS) and not any(c in w for c in "*?$<>{}") and not exists(w):
                    problems.append("README.md: command %s: %s does not exist" % (" ".join(words), w))
    return problems


def check_all(top, build):
    """{check name: [problems]}."""
    _anchor_cache.clear()
    return {"links": check_links(top), "mentions": check_mentions(top, build),
            "commands": check_commands(top, build)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--top", default=TOP, help="the source tree (default: this one)")
    ap.add_argument("--build", default=None, help="the build tree (default: TOP/build)")
    args = ap.parse_args()
    build = args.build or os.path.join(args.top, "build")
    bad = 0
    for name, problems in check_all(args.top, build).items():
        for p in problems:
            print(p)
        bad += len(problems)
        print("# %s: %d problem(s)" % (name, len(problems)), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
