#!/usr/bin/env python3
"""Checks that gateway/ keeps the shape gateway/README.md draws.

    tools/check-layers.py [--root DIR]   the tree (default: this checkout)
    tools/check-layers.py --self-test    shows that a broken tree fails

Every source file sits in a layer folder (or is main.c, or the public plugin
ABI under include/llmgate/). A file may include headers of its own layer and
of the layers below it, always by their layer-qualified name ("fleet/backend.h"),
never a header of a layer above. The public ABI includes nothing of ours, and
plugins include only it. A module (x.c with its x.h) may not reach itself
again through the includes of other modules: no include cycle, inside a layer
or across layers. Prints one line per violation (FILE:LINE: what) and exits 1
if there is any.
"""
import os
import re
import shutil
import sys
import tempfile

LAYERS = ["base", "http", "fleet", "route", "serve", "ops"]  # lowest first
ABI = "include/llmgate"
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]')


def sources(gw):
    for d, _, names in os.walk(gw):
        for n in sorted(names):
            if n.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(d, n), gw)


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for no, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield no, m.group(1), m.group(2)


def rank(rel):
    """The layer index of a gateway file: -1 for the ABI, len(LAYERS) for main.c."""
    if rel.startswith(ABI + "/"):
        return -1
    if rel == "main.c":
        return len(LAYERS)
    head = rel.split("/")[0]
    return LAYERS.index(head) if head in LAYERS and rel.count("/") == 1 else None


def module(rel):
    return os.path.splitext(rel)[0]


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def shortest_cycle(edges, comp):
    """One shortest cycle through the first module of a component, as a path."""
    inside = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges.get(v, ())):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, v, start]
            if w in inside and w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def check(root):
    gw = os.path.join(root, "gateway")
    files = set(sources(gw))
    errors = []
    edges = {}
    for rel in sorted(files):
        r = rank(rel)
        if r is None:
            errors.append(f"gateway/{rel}: in no layer folder ({', '.join(LAYERS)})")
            continue
        for no, kind, name in includes(os.path.join(gw, rel)):
            where = f"gateway/{rel}:{no}"
            if kind == "<":
                if name.startswith("llmgate/") and (ABI + "/" + name[8:]) not in files:
                    errors.append(f"{where}: <{name}> is not in gateway/{ABI}")
                continue
            if name in files:
                target = name
            elif "/" not in name and any(f.endswith("/" + name) for f in files if rank(f) != -1):
                errors.append(f'{where}: "{name}" hides its layer: include it as "LAYER/{name}"')
                continue
            else:
                continue  # generated (lg_version.h) or not ours
            t = rank(target)
            if r == -1:
                errors.append(f'{where}: the plugin ABI includes "{name}": it must stand alone')
            elif t is None:
                continue
            elif t > r:
                allowed = ", ".join(LAYERS[: r + 1])
                errors.append(f'{where}: upward include "{name}" '
                              f"({LAYERS[r]} may include {allowed})")
            if module(target) != module(rel):
                edges.setdefault(module(rel), set()).add(module(target))
    order = " < ".join(LAYERS)
    readme = os.path.join(gw, "README.md")
    if not os.path.exists(readme) or order not in open(readme, encoding="utf-8").read():
        errors.append(f"gateway/README.md: does not draw the layers as \"{order}\"")
    for comp in cycles(edges):
        errors.append("gateway: include cycle: " + " -> ".join(shortest_cycle(edges, comp))
                      + (f" (one of {len(comp)} modules that reach each other)"
                         if len(comp) > 2 else ""))
    plugins = os.path.join(root, "plugins")
    for d, _, names in os.walk(plugins):
        for n in sorted(names):
            if not n.endswith((".c", ".h")):
                continue
            p = os.path.join(d, n)
            for no, kind, name in includes(p):
                if kind == '"' and name.split("/")[0] in LAYERS:
                    errors.append(f"{os.path.relpath(p, root)}:{no}: a plugin includes "
                                  f'"{name}": plugins see only <llmgate/...>')
    return errors


def self_test(root):
    """A copy of the tree with one upward include and one cycle must fail."""
    tmp = tempfile.mkdtemp(prefix="lg-layers-")
    try:
        shutil.copytree(os.path.join(root, "gateway"), os.path.join(tmp, "gateway"))
        if check(tmp):
            print("self-test: the tree itself does not pass", file=sys.stderr)
            return 1
        low = os.path.join(tmp, "gateway", LAYERS[0])
        victim = sorted(f for f in os.listdir(low) if f.endswith(".c"))[0]
        with open(os.path.join(low, victim), "a") as f:
            f.write('#include "%s/worker.h"\n' % LAYERS[-2])
        with open(os.path.join(low, "cycle_a.h"), "w") as f:
            f.write('#include "%s/cycle_b.h"\n' % LAYERS[0])
        with open(os.path.join(low, "cycle_b.h"), "w") as f:
            f.write('#include "%s/cycle_a.h"\n' % LAYERS[0])
        errors = check(tmp)
        want = ["upward include", "include cycle"]
        missing = [w for w in want if not any(w in e for e in errors)]
        for e in errors:
            print("self-test found: " + e.replace(tmp + "/", ""))
        if missing:
            print("self-test: not detected: " + ", ".join(missing), file=sys.stderr)
            return 1
        print("self-test: an upward include and a cycle are refused")
        return 0
    finally:
        shutil.rmtree(tmp)


def main():
    args = sys.argv[1:]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if "--root" in args:
        root = args[args.index("--root") + 1]
    if "--self-test" in args:
        return self_test(root)
    errors = check(root)
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} layering violation(s); see gateway/README.md", file=sys.stderr)
        return 1
    print(f"gateway layers {' < '.join(LAYERS)} < main.c: no upward include, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
