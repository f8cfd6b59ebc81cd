#!/usr/bin/env python3
"""Fails when the top-level modules of src/ import each other in a cycle,
or the files of a module held to the same rule (LAYERED) do.

Every `crate::NAME` path counts, in `use` lines and inline, with `use
crate::{a, b::c}` groups expanded (inside a layered module, `super::NAME`
and `crate::MODULE::NAME` paths). A module is a file `src/NAME.rs` or a
directory `src/NAME/`; `main.rs` and `lib.rs` are the roots, not modules.
Prints the dependency order when there is none (lowest layer first), or
each cycle with one line that shows it, and exits 1.
"""
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# Modules whose files are layered too: codecs' shared blocks and tables
# below the scalar definitions and the vector kernels, which must not
# import each other in a circle.
LAYERED = ["codecs"]


def module_of(path: Path) -> str | None:
    rel = path.relative_to(SRC)
    name = rel.parts[0].removesuffix(".rs")
    return None if name in ("main", "lib") else name


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def used_modules(text: str, prefix: str = r"crate::") -> list[tuple[str, int]]:
    """(module, line) for each path after `prefix`, groups expanded."""
    found = []
    for m in re.finditer(r"\b" + prefix + r"(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)", text):
        line = text.count("\n", 0, m.start()) + 1
        target = m.group(1)
        if target.startswith("{"):
            depth, names, current = 0, [], ""
            for c in target[1:-1]:
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                elif c == "," and depth == 0:
                    names.append(current)
                    current = ""
                    continue
                current += c
            names.append(current)
            for name in names:
                head = name.strip().split("::")[0].strip()
                if head:
                    found.append((head, line))
        else:
            found.append((target, line))
    return found


def top_level_edges() -> dict[str, dict[str, str]]:
    modules = {module_of(p) for p in SRC.rglob("*.rs")} - {None}
    edges: dict[str, dict[str, str]] = {m: {} for m in modules}
    for path in sorted(SRC.rglob("*.rs")):
        source = module_of(path)
        if source is None:
            continue
        text = strip_comments(path.read_text())
        for target, line in used_modules(text):
            if target in modules and target != source:
                edges[source].setdefault(target, f"{path.relative_to(SRC.parent)}:{line}")
    return edges


def file_edges(module: str) -> dict[str, dict[str, str]]:
    """The files of `src/MODULE/` (mod.rs aside) and which of them each uses."""
    files = {p.stem: p for p in (SRC / module).glob("*.rs") if p.stem != "mod"}
    edges: dict[str, dict[str, str]] = {f: {} for f in files}
    for name, path in files.items():
        text = strip_comments(path.read_text())
        uses = used_modules(text, r"super::") + used_modules(text, rf"crate::{module}::")
        for target, line in uses:
            if target in files and target != name:
                edges[name].setdefault(target, f"{path.relative_to(SRC.parent)}:{line}")
    return edges


def main() -> int:
    failed = report("layers", top_level_edges())
    for module in LAYERED:
        failed |= report(f"{module} files", file_edges(module))
    return 1 if failed else 0


def report(what: str, edges: dict[str, dict[str, str]]) -> bool:
    """Prints the order or the cycles of `edges`; true when there are cycles."""
    modules = set(edges)
    # Tarjan's strongly connected components.
    index, low, stack, on_stack, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            sccs.append(sorted(scc))

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    cycles = [scc for scc in sccs if len(scc) > 1]
    if not cycles:
        print(f"{what}: no cycles; lowest first:", " < ".join(scc[0] for scc in sccs))
        return False
    for scc in cycles:
        print(f"{what}: cycle between {', '.join(scc)}:")
        for v in scc:
            for w, where in sorted(edges[v].items()):
                if w in scc:
                    print(f"  {v} -> {w}  ({where})")
    return True


if __name__ == "__main__":
    sys.exit(main())
