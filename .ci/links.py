#!/usr/bin/env python3
"""Fail on a dead relative link in the docs.

Checks every relative link and image in README.md, ARCHITECTURE.md,
BENCHMARKS.md, RELIABILITY.md and docs/**/*.md: the target file exists, and
a #fragment matches a heading of the target (GitHub's slugs: lowercase,
punctuation other than '-' and '_' removed, spaces to '-', repeats get -1,
-2, ...). Absolute links (http:, https:, mailto:) are not fetched.
Exit 1 naming file:line and the link; standard library only.

Usage: python3 .ci/links.py [ROOT]   (ROOT defaults to the repository)
"""
import os
import re
import sys

TOP = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "RELIABILITY.md"]

# [text](target) and ![alt](target); target up to whitespace or ')'
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
# <img src="..."> and <a href="...">
HTML = re.compile(r"<(?:img|a)\s[^>]*?(?:src|href)\s*=\s*\"([^\"]+)\"", re.I)
FENCE = re.compile(r"^\s{0,3}(```+|~~~+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def files(root):
    out = [os.path.join(root, f) for f in TOP if os.path.exists(os.path.join(root, f))]
    docs = os.path.join(root, "docs")
    for d, _, names in sorted(os.walk(docs)):
        for n in sorted(names):
            if n.endswith(".md"):
                out.append(os.path.join(d, n))
    return out


def strip_code(line):
    """The line without `inline code` spans (links in code are not links)."""
    return re.sub(r"(`+)(?:(?!\1).)*\1", "", line)


def lines_outside_fences(text):
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark[0] * len(mark)
            elif mark.startswith(fence):
                fence = None
            continue
        if fence is None:
            yield number, line


def slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # html tags
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters, digits, '_'
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen = {}
        found = set()
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for _, line in lines_outside_fences(text):
            m = HEADING.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else "%s-%d" % (s, n))
        # explicit anchors: <a name="x"> / <a id="x">
        for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", text):
            found.add(m.group(1))
        _anchors[path] = found
    return _anchors[path]


def check(root):
    problems = []
    for path in files(root):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        rel = os.path.relpath(path, root)
        for number, line in lines_outside_fences(text):
            plain = strip_code(line)
            targets = [m.group(1) for m in INLINE.finditer(plain)]
            targets += [m.group(1) for m in HTML.finditer(plain)]
            m = REFDEF.match(plain)
            if m:
                targets.append(m.group(1))
            for target in targets:
                if SCHEME.match(target) or target.startswith("//"):
                    continue
                file_part, _, fragment = target.partition("#")
                if file_part:
                    dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                    if not os.path.exists(dest):
                        problems.append("%s:%d: %s: no such file" % (rel, number, target))
                        continue
                else:
                    dest = path
                if fragment:
                    if not dest.endswith(".md") or os.path.isdir(dest):
                        continue
                    if fragment.lower() not in anchors(dest):
                        problems.append("%s:%d: %s: no heading #%s in %s"
                                        % (rel, number, target, fragment, os.path.relpath(dest, root)))
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    root = os.path.abspath(root)
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print("%d dead link(s)" % len(problems), file=sys.stderr)
        return 1
    print("links: %d files checked" % len(files(root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
