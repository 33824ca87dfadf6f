"""The layers of the README's Architecture section, checked on every module's imports.

The table between the ``layers`` markers of README.md is the one statement of the layering:
each module belongs to the first row whose patterns match its dotted name, and may import
only modules of its own row or a lower one. No import, lazy ones included, may close a cycle
between modules (a package's ``__init__`` is a module of its own), and the core rows import
no I/O library at all.
"""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("schemas", "producers", "projector", "queryd", "memstream")
# The core (the rows up to this one) does no I/O: none of these may be imported there.
CORE_ROWS = 2
IO_LIBRARIES = frozenset(
    "confluent_kafka redis sqlite3 fastapi starlette uvicorn httpx socket subprocess urllib "
    "http multiprocessing".split()
)


@cache
def layer_table() -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """(row, layer, module patterns) from the README's table, in order."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- layers -->(.*?)<!-- /layers -->", text, re.S)
    assert block, "README.md has no table between <!-- layers --> and <!-- /layers -->"
    rows = []
    for line in block.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            rows.append((int(cells[0]), cells[1], tuple(re.findall(r"`([^`]+)`", cells[2]))))
    assert [n for n, _, _ in rows] == list(range(len(rows))), rows
    return tuple(rows)


@cache
def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def row_of(module: str) -> int:
    for n, _, patterns in layer_table():
        if any(fnmatchcase(module, p) for p in patterns):
            return n
    raise AssertionError(f"{module} matches no row of the README's layer table")


def _resolve(name: str) -> str | None:
    """The project module an imported name lives in, or None for another package."""
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


@cache
def imports() -> dict[str, dict[str, int]]:
    """module -> {imported top-level name or project module: line}, lazy imports included."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules().items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        out: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            for name in names:
                target = _resolve(name) or name.partition(".")[0]
                if target != module:
                    out.setdefault(target, node.lineno)
        graph[module] = out
    return graph


def test_the_readme_table_places_every_module() -> None:
    for module in modules():
        row_of(module)


def test_imports_point_down_only() -> None:
    known = modules()
    upward = [
        f"{module} (row {row_of(module)}) imports {target} (row {row_of(target)}), "
        f"{known[module].relative_to(ROOT)}:{line}"
        for module, targets in imports().items()
        for target, line in targets.items()
        if target in known and row_of(target) > row_of(module)
    ]
    assert not upward, "imports that point up:\n" + "\n".join(upward)


def test_the_core_does_no_io() -> None:
    known = modules()
    found = [
        f"{module} imports {target}, {known[module].relative_to(ROOT)}:{line}"
        for module, targets in imports().items()
        if row_of(module) <= CORE_ROWS
        for target, line in targets.items()
        if target in IO_LIBRARIES
    ]
    assert not found, "I/O in the core:\n" + "\n".join(found)


def test_no_import_closes_a_cycle() -> None:
    known = modules()
    graph = {m: [t for t in targets if t in known] for m, targets in imports().items()}
    cycles = _cycles(graph)
    assert not cycles, "module cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def test_the_checks_find_what_they_look_for() -> None:
    """The checks can fail: a cycle and an upward import are found in a made-up graph."""
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert _cycles({"a": ["b"], "b": []}) == []
    assert row_of("schemas.codec") < row_of("memstream.cli")
