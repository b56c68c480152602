#!/usr/bin/env python3
"""Fails when the folders of src/ include each other in a cycle.

Reads every `#include "..."` of src/ (C, CUDA and headers), maps each file
and each included header to its folder (src/ itself is the folder "src"),
and looks for a cycle in the folder graph. The layering it protects is
docs/ARCHITECTURE.md's: model <- sched <- exec <- runtime <- tools, with
the backends and the root files below them. It also fails on the edges
FORBIDDEN names (the tools see contexts only through runtime/runtime.h).
Exit status 1 names the cycle or the edge and the includes that make it;
0 prints a one-line summary.

Usage: scripts/check-includes.py [SRC_DIR]
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
EXTS = (".c", ".h", ".cu", ".cuh")
# (from folder, to folder): includes that would skip a layer
FORBIDDEN = {("tools", "exec"): "tools read no context fields: they include runtime/runtime.h"}


def folder_of(src, path):
    rel = os.path.relpath(os.path.dirname(path), src)
    return "src" if rel == "." else rel.split(os.sep)[0]


def resolve(src, including, name):
    """The file an include names: beside the includer, else under src/
    (the include path), else None (generated or outside src/)."""
    for base in (os.path.dirname(including), src):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(p) and os.path.commonpath([p, src]) == src:
            return p
    return None


def graph(src):
    edges = {}  # (from folder, to folder) -> [(file, include)]
    nodes = set()
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(EXTS):
                continue
            path = os.path.join(root, f)
            a = folder_of(src, path)
            nodes.add(a)
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for name in INCLUDE.findall(text):
                target = resolve(src, path, name)
                if target is None:
                    continue
                b = folder_of(src, target)
                if a != b:
                    edges.setdefault((a, b), []).append((os.path.relpath(path, src), name))
    return nodes, edges


def find_cycle(nodes, edges):
    succ = {n: sorted(b for (a, b) in edges if a == n) for n in nodes}
    state = {n: 0 for n in nodes}  # 0 new, 1 on the stack, 2 done
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in succ[n]:
            if state[m] == 1:
                return stack[stack.index(m):] + [m]
            if state[m] == 0:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(nodes):
        if state[n] == 0:
            c = visit(n)
            if c:
                return c
    return None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "src"))
    nodes, edges = graph(src)
    bad = [(e, why) for e, why in FORBIDDEN.items() if e in edges]
    for (a, b), why in bad:
        print(f"check-includes: {a} must not include {b} ({why})")
        for f, name in edges[(a, b)][:5]:
            print(f"  {f} includes \"{name}\"")
    if bad:
        return 1
    cycle = find_cycle(nodes, edges)
    if cycle:
        print("check-includes: the folders of src/ include each other in a cycle: " + " -> ".join(cycle))
        for a, b in zip(cycle, cycle[1:]):
            for f, name in edges[(a, b)][:5]:
                print(f"  {a} -> {b}: {f} includes \"{name}\"")
        return 1
    print(f"check-includes: {len(nodes)} folders, {len(edges)} folder dependencies, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
