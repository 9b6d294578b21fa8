"""The core speaks Platform: no comparison of a device type with a device name in ``hwrng/``.

Every place hwrng's core would branch on a device type (``device.type == "cuda"``,
``platform.device_type != "cpu"``, ``backend in ("gloo", ...)``) is a fact the
:class:`hwrng.Platform` interface states instead (``uses_host_generator``,
``one_rank_per_device``, ``set_device``, :func:`hwrng.collective_backend`). The
source is read (every comparison of every module, lazy code included), not the
running process. ``hwrng/backends/cpu`` is the CPU backend: it names its own
device. The few places left name something that is not a platform's device
type; each is listed with why.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "hwrng"
#: torch's device types and the collective backends named after them.
DEVICE_NAMES = frozenset(
    {"cpu", "cuda", "npu", "xpu", "mps", "hpu", "xla", "mlu", "musa", "meta", "privateuseone"}
    | {"gloo", "nccl", "hccl", "mpi", "fake", "ucc", "xccl"}
)
#: (module, the name compared) -> why it is no platform branch.
ALLOWED = {
    ("hwrng._collectives", "gloo"): (
        "collective backend names: which process-group backends carry CPU tensors (gloo, mpi, "
        "torch's fake group) is a fact of torch.distributed, not of a platform"
    ),
    ("hwrng._collectives", "fake"): "the same list of process-group backends",
    ("hwrng._collectives", "mpi"): "the same list of process-group backends",
    ("hwrng._philox._triton", "cuda"): (
        "the Triton kernel's own device check: Triton compiles for CUDA devices only"
    ),
    ("hwrng._philox._triton", "cpu"): (
        "the Triton kernel's own device check: its interpreter runs on CPU tensors only"
    ),
    ("hwrng._philox._compiled", "cpu"): (
        "the numba kernels' own device check: they read and write host memory through NumPy "
        "views, which only CPU tensors have"
    ),
    ("hwrng.testing", "gloo"): (
        "a collective backend name: GLOO_SOCKET_IFNAME is gloo's own setting, for gloo ranks"
    ),
    ("hwrng._validation", "cpu"): (
        "torch keeps every generator's state as a CPU tensor, whatever its device"
    ),
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[:3] == ("hwrng", "backends", "cpu"):
            continue
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _names(node: ast.AST, bound: dict[str, set[str]] | None = None) -> set[str]:
    """The device names one side of a comparison holds: a string, a tuple/list/set of them,
    or a name bound to such a value (a module constant, or a loop over one)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & DEVICE_NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {n for element in node.elts for n in _names(element, bound)}
    if isinstance(node, ast.Name) and bound is not None:
        return bound.get(node.id, set())
    return set()


def _bound(tree: ast.Module) -> dict[str, set[str]]:
    """Names bound to device names: module constants, and loop variables over them."""
    bound: dict[str, set[str]] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
                names = _names(node.value)  # type: ignore[attr-defined]
                if names:
                    bound[target.id] = names
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension | ast.For) and isinstance(node.target, ast.Name):
            names = _names(node.iter, bound)
            if names:
                bound[node.target.id] = names
    return bound


def _scan(tree: ast.Module) -> dict[str, list[int]]:
    """Device name -> the lines of ``tree`` that compare something with it."""
    bound = _bound(tree)
    hits: dict[str, list[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for name in {n for side in sides for n in _names(side, bound)}:
                hits.setdefault(name, []).append(node.lineno)
        elif isinstance(node, ast.match_case):
            for name in _names(getattr(node.pattern, "value", node.pattern), bound):
                hits.setdefault(name, []).append(node.pattern.lineno)
    return hits


def device_name_comparisons() -> dict[tuple[str, str], list[int]]:
    """(module, device name) -> the lines that compare something with that name."""
    hits: dict[tuple[str, str], list[int]] = {}
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, lines in _scan(tree).items():
            hits[(module, name)] = lines
    return hits


def test_the_core_compares_no_device_type_with_a_device_name() -> None:
    hits = device_name_comparisons()
    branches = {key: lines for key, lines in hits.items() if key not in ALLOWED}
    assert not branches, (
        "device-name branches in hwrng/ (state the fact on Platform instead, or list it in "
        f"ALLOWED with why): {branches}"
    )


def test_every_allowance_is_still_needed() -> None:
    stale = sorted(set(ALLOWED) - set(device_name_comparisons()))
    assert not stale, f"ALLOWED lists comparisons no longer in the code: {stale}"


def test_the_scan_finds_what_it_must() -> None:
    """The oracle for the scanner: a comparison in each form is found, and nothing else."""
    source = (
        'a = device.type == "cuda"\n'
        'b = "cpu" != platform.device_type\n'
        'c = backend in ("gloo", "nccl")\n'
        'd = x not in {"npu"}\n'
        'match kind:\n    case "xpu":\n        pass\n'
        'HOSTS = ("mps",)\n'
        "e = any(name in backend for name in HOSTS)\n"
        'f = kind == "hpu_like"\n'
        'g = {"musa": 1}["musa"]\n'
    )
    found = _scan(ast.parse(source))
    assert set(found) == {"cuda", "cpu", "gloo", "nccl", "npu", "xpu", "mps"}
    assert found["mps"] == [9]
