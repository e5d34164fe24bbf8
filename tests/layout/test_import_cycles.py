"""No module of the gateway or of tasks imports itself through other modules.

Every import counts: at the top of a module, inside a function, under TYPE_CHECKING. A
package counts as its `__init__` module, so a package that imports one of its modules,
which imports the package back, is a cycle too (import-linter's acyclic_siblings contract
compares the children of a package only, and misses that one)."""

from __future__ import annotations

import grimp

PACKAGES = ("gateway", "tasks")


def import_cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """For each import that closes a cycle, the shortest way back: (a, b, ..., a); one per
    set of modules."""
    cycles: dict[frozenset[str], tuple[str, ...]] = {}
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                cycle = (module, *back)
                cycles.setdefault(frozenset(cycle), cycle)
    return sorted(cycles.values())


def test_the_detector_finds_a_cycle_through_a_package_and_its_module() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p", "p.app"), ("p.app", "p.views"), ("p.views", "p"),
                               ("p.views", "p.base"), ("q", "p.base")]:
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [("p", "p.app", "p.views", "p")]


def test_no_module_imports_itself_through_others() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert "gateway.simulator.simulator" in graph.modules, "the graph holds every module"
    cycles = import_cycles(graph)
    assert not cycles, "import cycles between modules:\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles)
