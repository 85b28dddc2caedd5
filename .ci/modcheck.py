#!/usr/bin/env python3
"""Checks the layout rules of ARCHITECTURE.md: no import cycle between the
top-level modules of src/ (read from `crate::` paths), and no source file over
600 lines not counting its `#[cfg(test)]` module. Prints the edges between
rooms; exits 1 on a violation."""
import os
import re
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else "src"
MAX_LINES = 600


def room_of(path):
    first = os.path.relpath(path, SRC).split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def code_of(text):
    text = re.sub(r"//[^\n]*", "", text)
    m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    return text[: m.start()] if m else text


def targets(code):
    found = set(re.findall(r"crate::(\w+)", code))
    for group in re.findall(r"crate::\{([^;]*?)\};", code, flags=re.S):
        # top-level names of a `use crate::{a, b::{c, d}}` group
        depth, token = 0, ""
        for ch in group + ",":
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                name = re.match(r"\s*(\w+)", token)
                if name:
                    found.add(name.group(1))
                token = ""
                continue
            token += ch
    return found


edges, problems = {}, []
for dirpath, _, files in os.walk(SRC):
    for name in files:
        if not name.endswith(".rs"):
            continue
        path = os.path.join(dirpath, name)
        code = code_of(open(path).read())
        if code.count("\n") > MAX_LINES:
            problems.append(f"{path}: {code.count(chr(10))} lines without tests (max {MAX_LINES})")
        room = room_of(path)
        if room in ("main", "lib"):
            continue
        for target in targets(code):
            if target != room:
                edges.setdefault(room, set()).add(target)

# A cycle exists iff a depth-first search meets a node still on its stack.
state, stack = {}, []


def visit(node):
    state[node] = "open"
    stack.append(node)
    for nxt in sorted(edges.get(node, ())):
        if state.get(nxt) == "open":
            problems.append("import cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
        elif nxt not in state:
            visit(nxt)
    stack.pop()
    state[node] = "done"


for room in sorted(edges):
    if room not in state:
        visit(room)

for room in sorted(edges):
    print(f"{room} -> {', '.join(sorted(edges[room]))}")
for problem in problems:
    print("ERROR:", problem)
sys.exit(1 if problems else 0)
