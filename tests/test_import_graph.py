"""hwrng's modules import one way: no module reaches itself through its imports.

The graph is read from the source (every ``import`` statement of every module
under ``hwrng/``, including the lazy ones inside functions, which can still
form a circle at call time), not from ``sys.modules``, so a cycle is found
even on a path no test happens to execute. Imports under ``if TYPE_CHECKING:``
never run and are left out. A package's ``__init__`` counts as the module the
package name refers to.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "hwrng"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    _module_name(path): path
    for path in sorted(ROOT.rglob("*.py"))
    if "suite" not in path.relative_to(ROOT).parts  # pytest test files, not library modules
}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (i for child in node.orelse for i in _runtime_imports(child))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _runtime_imports(node)


def _package_of(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The hwrng modules one import statement loads (not counting parent packages)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if alias.name in MODULES)
        return
    if node.level:
        base = _package_of(module).split(".")
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, node.module] if node.module else base)
    else:
        source = node.module or ""
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        if submodule in MODULES:
            yield submodule
        elif source in MODULES:
            yield source


def import_graph() -> dict[str, set[str]]:
    """Each hwrng module's runtime imports of other hwrng modules."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[module] = {
            target
            for node in _runtime_imports(tree)
            for target in _targets(module, node)
            if target != module
        }
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or ``None`` when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_walk_sees_the_package() -> None:
    graph = import_graph()
    assert {"hwrng", "hwrng.dtensor", "hwrng.backends.cpu", "hwrng.conformance"} <= set(graph)
    # the walk follows absolute, aliased and lazy imports alike
    assert "hwrng._exceptions" in graph["hwrng"]
    assert "hwrng.dtensor._hooks" in graph["hwrng.dtensor"]
    assert "hwrng" in graph["hwrng.backends.cpu"]


def test_hwrng_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"a"}}, ["a", "a"]),
        ({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}, None),  # a diamond is no cycle
        ({"x": {"y"}, "y": {"z"}, "z": {"y"}}, ["y", "z", "y"]),
    ],
)
def test_find_cycle_finds_exactly_cycles(
    graph: dict[str, set[str]], expected: list[str] | None
) -> None:
    assert find_cycle(graph) == expected
