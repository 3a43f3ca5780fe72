"""The emulator's modules import one another in one direction: no import circle spans more than 3 of them.

Typing-only imports count too (grimp, like import-linter, reads imports under `TYPE_CHECKING`): a
circle of annotations still makes every module in it depend on all the others. Components see the
rest of the simulation through the narrow interfaces of `broker_emulator.ports` and of their own
host protocols, not through `Simulation`, which is the one module that knows them all.
"""

from __future__ import annotations

import grimp

PACKAGE = "broker_emulator"
MAX_CYCLE_MODULES = 3


def _strongly_connected_components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative, in sorted order so a failure reads the same on every run."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def _emulator_imports() -> dict[str, set[str]]:
    graph = grimp.build_graph(PACKAGE, cache_dir=None)
    modules = {m for m in graph.find_descendants(PACKAGE)} | {PACKAGE}
    return {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}


def test_the_import_cycle_finder_finds_a_circle() -> None:
    """The helper itself: a three-module circle with a tail is one component of three."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert sorted(_strongly_connected_components(edges), key=len) == [["d"], ["a", "b", "c"]]


def test_no_import_circle_spans_more_than_three_emulator_modules() -> None:
    edges = _emulator_imports()
    assert len(edges) > 10, "grimp found too few emulator modules: is the package importable?"
    cycles = [c for c in _strongly_connected_components(edges) if len(c) > 1]
    largest = max(cycles, key=len, default=[])
    assert len(largest) <= MAX_CYCLE_MODULES, (
        f"{len(largest)} emulator modules import one another in a circle (at most {MAX_CYCLE_MODULES} allowed): "
        + ", ".join(largest)
        + "\nimports within it:\n"
        + "\n".join(f"  {m} -> {', '.join(sorted(edges[m] & set(largest)))}" for m in largest))
