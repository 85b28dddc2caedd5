#!/usr/bin/env python3
"""Checks the layout rules of ARCHITECTURE.md: no import cycle between the
top-level modules of src/ (read from `crate::` paths), no circle of files
inside any room (read from `super::`, `self::` and `crate::room::` paths; a
parent naming its own children, as it declares, re-exports or registers them,
is the module tree and not counted), and no source file over 600 lines not
counting its `#[cfg(test)]` module. Prints the edges between rooms, then each
room's lines and its type with the most inherent methods; exits 1 on a
violation."""
import os
import re
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else "src"
MAX_LINES = 600


def room_of(path):
    first = os.path.relpath(path, SRC).split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def module_of(path):
    """The module path of a file: `src/a/b.rs` and `src/a/b/mod.rs` are
    `("a", "b")`; `lib.rs` and `main.rs` are the crate root `()`."""
    parts = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if parts[-1] == "mod" or parts in (["lib"], ["main"]):
        parts = parts[:-1]
    return tuple(parts)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def code_of(text):
    text = strip_comments(text)
    m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
    return text[: m.start()] if m else text


def group_heads(group):
    """The first names of each path of a `{a, b::{c, d}}` group."""
    depth, token, heads = 0, "", []
    for ch in group + ",":
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            name = re.match(r"\s*(\w+(?:\s*::\s*\w+)*)", token)
            if name:
                heads.append(re.sub(r"\s+", "", name.group(1)))
            token = ""
            continue
        token += ch
    return heads


def targets(code):
    found = set(re.findall(r"crate::(\w+)", code))
    for group in re.findall(r"crate::\{([^;]*?)\};", code, flags=re.S):
        found.update(head.split("::")[0] for head in group_heads(group))
    return found


def paths_of(code, children):
    """Every module path a file's code names, as lists of segments relative
    to where it starts: `crate`, `super`, `self`, or a child of this file."""
    out = []
    starts = r"crate|super|self" + "".join("|" + re.escape(c) for c in children)
    pattern = r"(?<![\w:])((?:%s)(?:\s*::\s*\w+)+)(\s*::\s*\{[^;]*?\})?" % starts
    for m in re.finditer(pattern, code, flags=re.S):
        base = re.sub(r"\s+", "", m.group(1)).split("::")
        if m.group(2):
            group = m.group(2).strip()[2:].strip()[1:-1]
            for head in group_heads(group):
                out.append(base + head.split("::"))
        else:
            out.append(base)
    return out


files = {}
for dirpath, _, names in os.walk(SRC):
    for name in names:
        if name.endswith(".rs"):
            path = os.path.join(dirpath, name)
            files[path] = open(path).read()
modules = {module_of(p): p for p in files}

edges, problems = {}, []
file_edges = {}
for path, text in files.items():
    code = code_of(text)
    if code.count("\n") > MAX_LINES:
        problems.append(f"{path}: {code.count(chr(10))} lines without tests (max {MAX_LINES})")
    room = room_of(path)
    if room in ("main", "lib"):
        continue
    for target in targets(code):
        if target != room:
            edges.setdefault(room, set()).add(target)
    # Files of the same room this file's code names.
    here = module_of(path)
    children = [m[-1] for m in modules if len(m) == len(here) + 1 and m[:-1] == here]
    for segments in paths_of(code, children):
        if segments[0] == "crate":
            resolved = list(segments[1:])
        elif segments[0] == "self":
            resolved = list(here) + segments[1:]
        elif segments[0] == "super":
            base = list(here)
            while segments and segments[0] == "super":
                base, segments = base[:-1], segments[1:]
            resolved = base + segments
        else:
            resolved = list(here) + segments
        # The longest prefix that is a file's module.
        while resolved and tuple(resolved) not in modules:
            resolved.pop()
        target = modules.get(tuple(resolved))
        # A parent naming its own children (declaring, re-exporting or
        # registering them) is the module tree, not a dependency.
        is_child = tuple(resolved[: len(here) + 1])[:-1] == here and len(resolved) > len(here)
        if target and target != path and resolved and resolved[0] == room and not is_child:
            file_edges.setdefault(path, set()).add(target)


def cycles(graph):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return found


for component in cycles(edges):
    problems.append("import cycle between rooms: " + ", ".join(component))
for component in cycles(file_edges):
    room = room_of(component[0])
    names = [os.path.relpath(p, os.path.join(SRC, room)) for p in component]
    problems.append(f"circle of files in {room}/: " + ", ".join(names))


def impl_methods(code):
    """(type name, number of `fn`s directly inside) for each inherent impl."""
    for m in re.finditer(r"\bimpl\b(\s*<[^{;]*?>)?\s+([\w:]+)(\s*<[^{;]*?>)?\s*(where[^{]*)?\{", code):
        if re.search(r"\bfor\b", m.group(0)):
            continue
        depth, i, n = 1, m.end(), 0
        start = i
        while i < len(code) and depth:
            ch = code[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            i += 1
        body, depth, level = code[start : i - 1], 0, []
        for token in re.finditer(r"[{}]|\bfn\b", body):
            if token.group(0) == "{":
                depth += 1
            elif token.group(0) == "}":
                depth -= 1
            elif depth == 0:
                n += 1
        yield m.group(2).split("::")[-1], n


lines, methods, defined = {}, {}, {}
for path, text in files.items():
    room = room_of(path)
    lines[room] = lines.get(room, 0) + text.count("\n")
    code = strip_comments(text)
    for name in re.findall(r"\b(?:struct|enum)\s+(\w+)", code_of(text)):
        defined.setdefault(name, room)
    for name, n in impl_methods(code_of(text)):
        methods[name] = methods.get(name, 0) + n

for room in sorted(edges):
    print(f"{room} -> {', '.join(sorted(edges[room]))}")
print()
largest = {}
for name, n in methods.items():
    room = defined.get(name)
    if room and n > largest.get(room, ("", -1))[1]:
        largest[room] = (name, n)
for room in sorted(lines, key=lambda r: -lines[r]):
    name, n = largest.get(room, ("-", 0))
    print(f"{room:<10} {lines[room]:>6} lines   largest type: {name} ({n} methods)")
for problem in problems:
    print("ERROR:", problem)
sys.exit(1 if problems else 0)
