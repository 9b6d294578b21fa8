"""The repository's modules import one way: no module reaches itself through its imports.

The graph is read from the source (every ``import`` statement of every module
of every distribution -- ``hwrng/``, ``backends/*/src``, ``conformance/src`` --
including the lazy ones inside functions, which can still form a circle at call
time), not from ``sys.modules``, so a cycle is found even on a path no test
happens to execute. Imports under ``if TYPE_CHECKING:`` never run and are left
out. A package's ``__init__`` counts as the module the package name refers to.

The backends, the suite and the out-of-tree examples (``examples/*/src``) are
plugins like a vendor's: they may import only hwrng's public names (no
``hwrng._...`` module, no private name), and never touch a private attribute
that a hwrng base class keeps on its instances (``self._counter``): a vendor
sets what hwrng lets it set through public class attributes.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
ROOT = REPOSITORY / "hwrng"
#: The import roots of the plugin distributions, which must use hwrng's public names only:
#: the repository's own and every example backend's.
PLUGINS = {
    "hwrng_cuda": REPOSITORY / "backends" / "cuda" / "src" / "hwrng_cuda",
    "hwrng_npu": REPOSITORY / "backends" / "npu" / "src" / "hwrng_npu",
    "hwrng_conformance": REPOSITORY / "conformance" / "src" / "hwrng_conformance",
    **{
        package.name: package
        for package in sorted((REPOSITORY / "examples").glob("*/src/*"))
        if (package / "__init__.py").is_file()
    },
}


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path) -> dict[str, Path]:
    return {
        _module_name(path, root): path
        for path in sorted(root.rglob("*.py"))
        if "suite" not in path.relative_to(root).parts  # pytest test files, not library modules
    }


MODULES = {
    name: path for root in (ROOT, *PLUGINS.values()) for name, path in _modules(root).items()
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


def _all_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, those under ``if TYPE_CHECKING:`` too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def import_graph(*, type_only: bool = False) -> dict[str, set[str]]:
    """Each hwrng module's runtime imports of other hwrng modules (with ``type_only``, all)."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        imports = _all_imports(tree) if type_only else _runtime_imports(tree)
        graph[module] = {
            target for node in imports for target in _targets(module, node) if target != module
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
    assert {"hwrng", "hwrng.dtensor", "hwrng.backends.cpu", "hwrng_conformance"} <= set(graph)
    assert {"hwrng_cuda", "hwrng_npu", "hwrng_conformance.runner"} <= set(graph)
    assert {"hwrng_example_vcpu", "hwrng_example_vcpu.device"} <= set(graph)
    # the walk follows absolute, aliased and lazy imports alike
    assert "hwrng._exceptions" in graph["hwrng"]
    assert "hwrng.dtensor._hooks" in graph["hwrng.dtensor"]
    assert "hwrng" in graph["hwrng.backends.cpu"]


def test_hwrng_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_not_even_through_imports_for_type_checking() -> None:
    """A circle that only annotations close is a circle still: the modules cannot be read alone.

    The platform, the host generator and the counters formed one
    (``_platform -> _host -> _counters -> _platform``) until the counter view moved beside
    the platform that hands it out.
    """
    graph = import_graph(type_only=True)
    assert "hwrng._platform" in graph["hwrng._counters"], "the walk sees type-only imports"
    cycle = find_cycle(graph)
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


def _every_import(tree: ast.AST) -> Iterator[tuple[str, list[str]]]:
    """``(module, names)`` of every import statement, TYPE_CHECKING ones included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            yield node.module or "", [alias.name for alias in node.names]


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_a_plugin_distribution_imports_only_hwrngs_public_names(plugin: str) -> None:
    paths = sorted(PLUGINS[plugin].rglob("*.py"))
    assert paths
    private = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for module, names in _every_import(tree):
            if module.split(".")[0] != "hwrng":
                continue
            parts = module.split(".") + [n for n in names if module == "hwrng"]
            if any(part.startswith("_") for part in parts):
                private.append(f"{path.relative_to(REPOSITORY)}: {module} {names}")
    assert not private, private


#: The hwrng modules whose classes a backend subclasses.
BASES = [ROOT / name for name in ("_platform.py", "_device_module.py", "_counters.py", "_host.py")]


def _private_self_attributes(tree: ast.AST) -> set[str]:
    """The private attributes ``self._x`` that a module's methods read or write."""
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    }


def test_the_bases_private_attributes_are_seen() -> None:
    kept = set().union(*(_private_self_attributes(ast.parse(p.read_text())) for p in BASES))
    assert {"_counter", "_module", "_generators"} <= kept


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_a_plugin_never_touches_a_private_attribute_of_hwrngs_bases(plugin: str) -> None:
    kept = set().union(*(_private_self_attributes(ast.parse(p.read_text())) for p in BASES))
    touched = []
    for path in sorted(PLUGINS[plugin].rglob("*.py")):
        used = _private_self_attributes(ast.parse(path.read_text(encoding="utf-8")))
        touched += [f"{path.relative_to(REPOSITORY)}: self.{name}" for name in sorted(used & kept)]
    assert not touched, touched
