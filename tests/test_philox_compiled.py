"""The invariant ops' compiled CPU path (numba) computes the contract bit for bit.

Where numba is installed (the ``test`` extra installs it), ``hwrng._philox`` draws CPU values
with the kernels of ``hwrng._philox._numba_kernels``. Checked here: the choice and what hwrng
says about it (``HWRNG_INVARIANT_CPU``, ``hwrng backends``); the contract's known answers and
the independent reference's values (``hwrng_conformance.invariant_reference``) on that path;
its values equal to the tensor ops' (the generic path, the reference implementation), bit for
bit, for every op and dtype over odd shard layouts, empty and tiny shards and the calls it hands
to the generic path; the kernels' machine code free of fused multiply-adds and their float32
code free of float64; numba's on-disk cache where the package directory cannot take it.
The tests that need numba skip without it (the suite then runs the tensor ops alone).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
import torch
from hwrng_conformance import invariant_reference as reference
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from known_answers import bits_of, mismatches
from philox_cases import FLOAT_NAMES, OPS, op_cases
from torch.distributed.tensor import Shard

import hwrng
from hwrng import _philox as philox
from hwrng import invariant
from hwrng._cli import main as cli_main
from hwrng._philox import _compiled as compiled
from hwrng._philox import _distributions as generic

needs_numba = pytest.mark.skipif(
    compiled._kernels_or_error()[1] is not None,
    reason=f"the compiled path cannot run here: {compiled._kernels_or_error()[1]}",
)


@pytest.fixture
def path(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """``HWRNG_INVARIANT_CPU`` set to the test's parameter for the test."""
    monkeypatch.setenv(compiled.SETTING, request.param)
    value: str = request.param
    return value


# -- the choice, and what hwrng says about it --------------------------------------------------


def refuse(*args: object, **kwargs: object) -> torch.Tensor:
    raise AssertionError("the generic path ran")


@needs_numba
def test_the_compiled_path_serves_the_cpu_and_hwrng_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import numba

    monkeypatch.delenv(compiled.SETTING, raising=False)
    assert compiled.serves(torch.arange(3))
    assert compiled.serves(philox.ShardIndices((torch.arange(2),), (4,)))
    assert not compiled.serves(torch.arange(3, device="meta"))
    said = philox.cpu_path()
    assert said.startswith(f"compiled with numba {numba.__version__} (")
    assert cli_main(["backends"]) == 0
    assert f"invariant ops on the CPU: {said}" in capsys.readouterr().out
    # the public ops draw without the generic path...
    spec = hwrng.ShardSpec((4, 6), (2,), (Shard(0),), (1,))
    for name in ("uniform", "normal", "trunc_normal", "bernoulli_mask", "dropout"):
        monkeypatch.setattr(generic, name, refuse)
    hwrng.seed_everything(3)
    invariant.uniform_(torch.empty(2, 6), spec)
    invariant.normal_(torch.empty(2, 6), spec)
    invariant.trunc_normal_(torch.empty(2, 6, dtype=torch.bfloat16), spec)
    invariant.bernoulli_(torch.empty(2, 6), spec, 0.3)
    invariant.dropout(torch.ones(2, 6, dtype=torch.float16), spec, 0.3)
    # ...and with HWRNG_INVARIANT_CPU=tensor they take it
    monkeypatch.setenv(compiled.SETTING, "tensor")
    assert not compiled.serves(torch.arange(3))
    assert philox.cpu_path() == "tensor ops (HWRNG_INVARIANT_CPU=tensor)"
    with pytest.raises(AssertionError, match="the generic path ran"):
        invariant.uniform_(torch.empty(2, 6), spec)


def test_an_unknown_setting_is_refused_before_the_generator_moves(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = hwrng.ShardSpec((4, 6), (2,), (Shard(0),), (1,))
    hwrng.seed_everything(3)
    before = torch.get_rng_state()
    monkeypatch.setenv(compiled.SETTING, "fast")
    for op in (
        lambda: invariant.uniform_(torch.empty(2, 6), spec),
        lambda: invariant.trunc_normal_(torch.empty(2, 6), spec),
        lambda: invariant.dropout(torch.ones(2, 6), spec, 0.5),
    ):
        with pytest.raises(hwrng.InvalidValueError, match="HWRNG_INVARIANT_CPU='fast'"):
            op()
        assert torch.equal(torch.get_rng_state(), before)
    assert cli_main(["backends"]) == 0
    assert "invariant ops on the CPU: refused (HWRNG_INVARIANT_CPU='fast'" in (
        capsys.readouterr().out
    )
    monkeypatch.setenv(compiled.SETTING, " Tensor ")  # read as the words say
    assert philox.cpu_path() == "tensor ops (HWRNG_INVARIANT_CPU=tensor)"


def test_without_numba_the_tensor_ops_run_and_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a process without numba sees (its import made to fail, as a broken install's)."""
    monkeypatch.setattr(compiled, "_kernels_or_error", lambda: (None, "numba is not installed"))
    monkeypatch.delenv(compiled.SETTING, raising=False)
    assert not compiled.serves(torch.arange(3))
    assert philox.cpu_path() == (
        "tensor ops (numba is not installed; for the compiled path: pip install 'hwrng[fast]')"
    )
    expected = generic.normal(5, 8, torch.arange(9), torch.float32)
    assert torch.equal(philox.normal(5, 8, torch.arange(9), torch.float32), expected)
    monkeypatch.setenv(compiled.SETTING, "compiled")
    with pytest.raises(hwrng.InvalidValueError, match="compiled CPU path cannot run"):
        philox.drawer("uniform", torch.float32, low=0.0, high=1.0)


# -- the contract's answers on the compiled path, and on the tensor ops -----------------------


@pytest.mark.parametrize(
    "path", [pytest.param("compiled", marks=needs_numba), "tensor"], indirect=True
)
def test_both_paths_draw_the_known_answers(path: str) -> None:
    assert mismatches("cpu") == []


@needs_numba
@settings(max_examples=40, deadline=None)
@given(
    case=op_cases(tuple(OPS[:4])),
    seed=st.integers(0, 2**64 - 1),
    position=st.integers(0, 2**63 - 1),
    elements=st.lists(st.integers(0, 2**61), min_size=1, max_size=6),
)
def test_the_compiled_values_are_the_independent_references(
    case: tuple[str, torch.dtype, dict[str, Any]], seed: int, position: int, elements: list[int]
) -> None:
    """Any op, dtype, parameters, seed, position and elements (any order, far out): the compiled
    path's values are ``invariant_reference``'s (written from the contract alone)."""
    op, dtype, parameters = case
    index = torch.tensor(elements)
    try:
        if op == "bernoulli":
            got = compiled.bernoulli_mask(seed, position, index, parameters["p"])
        else:
            got = getattr(compiled, op)(seed, position, index, dtype, **parameters)
    except hwrng.InvalidValueError:  # e.g. no float16 value inside [a, b]
        assume(False)
    with np.errstate(all="ignore"):
        if op == "bernoulli":
            expected = [reference.bernoulli(seed, position, e, parameters["p"]) for e in elements]
        else:
            element = getattr(reference, op)
            expected = [
                element(seed, position, e, FLOAT_NAMES[dtype], **parameters) for e in elements
            ]
    assert bits_of(got) == expected


# -- compiled == tensor ops, over odd shard layouts -------------------------------------------


@st.composite
def dim_picks(draw: st.DrawFn, size: int) -> tuple[list[int], tuple[tuple[int, int], ...] | None]:
    """Global positions along one dim, and their runs where the layout gives them (as
    ``hwrng.invariant`` does for ``Shard`` and ``_StridedShard``): all, a range at an odd
    offset, several ranges, nothing, any subset, or a subset in any order."""
    kind = draw(st.sampled_from(["all", "range", "ranges", "empty", "subset", "shuffled"]))
    if kind == "all":
        return list(range(size)), ((0, size),)
    if kind == "empty":
        start = draw(st.integers(0, size))
        return [], ((start, 0),)
    if kind in ("range", "ranges"):
        runs = []
        for _ in range(1 if kind == "range" else draw(st.integers(2, 3))):
            start = draw(st.integers(0, size - 1))
            runs.append((start, draw(st.integers(1, size - start))))
        return [i for start, length in runs for i in range(start, start + length)], tuple(runs)
    subset = sorted(draw(st.sets(st.integers(0, size - 1), min_size=1, max_size=12)))
    return (draw(st.permutations(subset)) if kind == "shuffled" else subset), None


@st.composite
def layouts(draw: st.DrawFn) -> tuple[philox.ShardIndices, torch.Tensor]:
    """A shard of a global shape of 1 to 3 dims (some far out: a leading dim of up to 2**50),
    as its description (with or without the runs) and as its flat global indices."""
    shape = draw(st.lists(st.integers(1, 37), min_size=1, max_size=3))
    if draw(st.booleans()):
        shape[0] = draw(st.integers(2**40, 2**50))
    picks, runs = [], []
    for size in shape:
        if size > 2**20:  # far rows: a few, near the end or anywhere
            start = draw(st.one_of(st.just(size - 3), st.integers(0, size - 3)))
            picks.append([start, start + 1, start + 2])
            runs.append(((start, 3),))
        else:
            positions, dim_runs = draw(dim_picks(size))
            picks.append(positions)
            runs.append(dim_runs)
    dims = tuple(torch.tensor(p, dtype=torch.int64) for p in picks)
    ranges = tuple(runs) if all(r is not None for r in runs) and draw(st.booleans()) else None
    shard = philox.ShardIndices(dims, tuple(shape), ranges)  # type: ignore[arg-type]
    return shard, philox.flat_index(list(dims), shape)


def equal_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit, but any NaN equals any NaN (IEEE leaves a NaN's bits to the device)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        nan = torch.isnan(a)
        if not torch.equal(nan, torch.isnan(b)):
            return False
        a, b = a.masked_fill(nan, 0), b.masked_fill(nan, 0)
    return bits_of(a) == bits_of(b)


def both(
    op: str, dtype: torch.dtype, parameters: dict[str, Any], seed: int, position: int, index: Any
) -> tuple[Any, Any]:
    """The op's values (dropout: output and mask) by the compiled path and the generic path."""
    if op == "bernoulli":
        p = parameters["p"]
        if parameters.get("per_element"):
            shape = philox.index_shape(index)
            p = torch.rand(shape[-1:], generator=torch.Generator().manual_seed(seed % 2**32))
            p = p.to(dtype)
        return (
            compiled.bernoulli_mask(seed, position, index, p),
            generic.bernoulli_mask(seed, position, index, p),
        )
    if op == "dropout":
        shape = philox.index_shape(index)
        source = torch.randn(shape, generator=torch.Generator().manual_seed(seed % 2**32)) * 4
        if source.numel() > 2:  # an infinity and a zero of each sign
            source.view(-1)[:3] = torch.tensor([math.inf, -0.0, 0.0])
        source = source.to(dtype)
        return (
            compiled.dropout(seed, position, index, source, parameters["p"]),
            generic.dropout(seed, position, index, source, parameters["p"]),
        )
    return (
        getattr(compiled, op)(seed, position, index, dtype, **parameters),
        getattr(generic, op)(seed, position, index, dtype, **parameters),
    )


@needs_numba
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=op_cases(),
    layout=layouts(),
    seed=st.integers(0, 2**64 - 1),
    position=st.integers(0, 2**61 - 1).map(lambda p: p * 4),
    per_element=st.booleans(),
)
def test_the_compiled_path_draws_the_tensor_ops_values_on_any_shard(
    case: tuple[str, torch.dtype, dict[str, Any]],
    layout: tuple[philox.ShardIndices, torch.Tensor],
    seed: int,
    position: int,
    per_element: bool,
) -> None:
    op, dtype, parameters = case
    shard, flat = layout
    if op == "bernoulli":
        parameters = {**parameters, "per_element": per_element}
    for index in (shard, flat):
        try:
            fast, reference_values = both(op, dtype, parameters, seed, position, index)
        except hwrng.InvalidValueError:  # e.g. no float16 value inside [a, b]
            assume(False)
        if op == "dropout":
            assert equal_bits(fast[0], reference_values[0]) and torch.equal(
                fast[1], reference_values[1]
            )
        else:
            assert equal_bits(fast, reference_values)


@needs_numba
@pytest.mark.parametrize("dtype", list(FLOAT_NAMES), ids=str)
def test_long_runs_at_every_offset_in_a_block(dtype: torch.dtype) -> None:
    """Runs of 2**12 + 3 values at each offset in a block, far out (a block number past 2**32:
    its second counter word set): the kernels' whole-block loops (vectorised: their remainders
    too) and their partial ends."""
    cases: list[tuple[str, dict[str, Any]]] = [
        ("uniform", {"low": -1.5, "high": 2.25}),
        ("normal", {"mean": 0.5, "std": 3.0}),
        ("trunc_normal", {"a": -2.0, "b": 2.0}),
        ("trunc_normal", {"mean": 1.0, "std": 2.0, "a": 4.0, "b": 30.0}),
        ("bernoulli", {"p": 0.3}),
        ("dropout", {"p": 0.1}),
    ]
    for first in (2**36, 2**36 + 1, 2**36 + 2, 2**36 + 3):
        index = torch.arange(first, first + 2**12 + 3)
        for op, parameters in cases:
            fast, slow = both(op, dtype, parameters, 2**63 + 5, 2**40 + 4096, index)
            if op == "dropout":
                assert equal_bits(fast[0], slow[0]) and torch.equal(fast[1], slow[1])
            else:
                assert equal_bits(fast, slow), (op, first)


@needs_numba
def test_empty_tiny_and_handed_over_calls() -> None:
    """An empty shard, one element at each lane, a 0-d index, an ``out`` of another dtype or
    not contiguous (handed to the generic path, which writes or refuses it the same), a
    non-contiguous dropout input, refusals as the generic path's."""
    ops = {
        "uniform": lambda i, **k: philox.uniform(1, 4, i, torch.float32, **k),
        "normal": lambda i, **k: philox.normal(1, 4, i, torch.float64, **k),
        "trunc_normal": lambda i, **k: philox.trunc_normal(1, 4, i, torch.bfloat16, **k),
        "bernoulli": lambda i, **k: philox.bernoulli_mask(1, 4, i, 0.5, **k),
    }
    generics = {
        "uniform": lambda i, **k: generic.uniform(1, 4, i, torch.float32, **k),
        "normal": lambda i, **k: generic.normal(1, 4, i, torch.float64, **k),
        "trunc_normal": lambda i, **k: generic.trunc_normal(1, 4, i, torch.bfloat16, **k),
        "bernoulli": lambda i, **k: generic.bernoulli_mask(1, 4, i, 0.5, **k),
    }
    empty = philox.ShardIndices((torch.arange(0), torch.arange(3)), (5, 3), (((2, 0),), ((0, 3),)))
    for name, op in ops.items():
        assert op(empty).shape == (0, 3) and op(torch.arange(0)).shape == (0,)
        for e in (0, 1, 2, 3, 2**45 + 6):
            assert equal_bits(op(torch.tensor([e])), generics[name](torch.tensor([e])))
        assert equal_bits(op(torch.tensor(9)), generics[name](torch.tensor(9)))
        wide = torch.empty(5, dtype=torch.float64)  # the values as computed, in out's dtype
        expected = generics[name](torch.arange(5), out=torch.empty(5, dtype=torch.float64))
        assert equal_bits(op(torch.arange(5), out=wide), expected)
        strided = torch.empty(10)[::2]
        with pytest.raises(hwrng.InvalidValueError, match="contiguous"):
            op(torch.arange(5), out=strided)
        with pytest.raises(hwrng.InvalidValueError, match=">= 0"):
            op(torch.tensor([3, -1]))
    # an out written in place counts as modified for autograd; a leaf needing grad is refused
    for name, op in ops.items():
        target = torch.empty(5, dtype=torch.bool if name == "bernoulli" else None)
        dtype = {"normal": torch.float64, "trunc_normal": torch.bfloat16}.get(name)
        target = target if dtype is None else target.to(dtype)
        version = target._version
        op(torch.arange(5), out=target)
        assert target._version > version, name
        leaf = torch.empty(5, dtype=target.dtype, requires_grad=name != "bernoulli")
        if leaf.requires_grad:
            with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
                op(torch.arange(5), out=leaf)
    source = torch.randn(6, 4).t()  # not contiguous: handed over
    index = philox.flat_index([torch.arange(4), torch.arange(6)], (4, 6))
    for values, expected in zip(
        philox.dropout(3, 8, index, source, 0.4),
        generic.dropout(3, 8, index, source, 0.4),
        strict=True,
    ):
        assert torch.equal(values, expected) and values.stride() == expected.stride()
    with pytest.raises(hwrng.InvalidValueError, match="has shape"):
        compiled.dropout(3, 8, torch.arange(5), torch.ones(4), 0.5)
    needs_grad = torch.ones(5, requires_grad=True)  # its output joins the graph, as torch's
    assert philox.dropout(3, 8, torch.arange(5), needs_grad, 0.5)[0].grad_fn is not None


# -- what the compiler made of the kernels ----------------------------------------------------

#: x86 fused multiply-adds (FMA3 and AVX-512), any width and sign
FMA = re.compile(r"\bv?f(n?m(add|sub))\w*(ps|pd|ss|sd)\b", re.IGNORECASE)


def fused_multiply_adds(asm: str) -> list[str]:
    return [line.strip() for line in asm.splitlines() if FMA.search(line)]


def test_the_check_finds_a_fused_multiply_add() -> None:
    """The machine-code check is not vacuous: numba told to contract emits vfmadd."""
    numba = pytest.importorskip("numba")

    def axpy(a: float, x: float, y: float) -> float:
        return a * x + y

    loose = numba.njit(fastmath={"contract"})(axpy)
    strict = numba.njit(fastmath=False)(axpy)
    f64 = numba.types.float64
    loose.compile((f64, f64, f64))
    strict.compile((f64, f64, f64))
    signature = loose.signatures[0]
    from llvmlite import binding

    if not binding.get_host_cpu_features().get("fma"):
        pytest.skip("this CPU has no fused multiply-add")
    assert fused_multiply_adds(loose.inspect_asm(signature))
    assert not fused_multiply_adds(strict.inspect_asm(strict.signatures[0]))


@needs_numba
def test_the_kernels_never_fuse_and_float32_kernels_never_widen() -> None:
    """Every kernel, compiled afresh for the argument types hwrng gives it (numba shows no code
    it loaded from its cache): no fused multiply-add in its machine code, and, in the float32
    kernels, no float64 operation in its LLVM IR."""
    import numba

    from hwrng._philox import _numba_kernels as kernels

    index = torch.arange(3, 40)
    for dtype in (torch.float32, torch.float64):  # every kernel runs once: its argument types
        compiled.uniform(1, 4, index, dtype, low=-1.0, high=2.0)
        compiled.normal(1, 4, index, dtype)
        compiled.trunc_normal(1, 4, index, dtype)
        compiled.dropout(1, 4, index, torch.ones(37, dtype=dtype), 0.5)
    compiled.bernoulli_mask(1, 4, index, 0.5)
    compiled.bernoulli_mask(1, 4, index, torch.full((37,), 0.5))
    widened = re.compile(r"\b(fadd|fsub|fmul|fdiv|fneg|fcmp \w+) double\b|\bfpext\b|to double\b")
    for name, kernel in kernels.KERNELS.items():
        assert kernel.signatures, name
        for signature in kernel.signatures:
            fresh = numba.njit(**kernels._OPTIONS)(kernel.py_func)
            fresh.compile(signature)
            assert fused_multiply_adds(fresh.inspect_asm(signature)) == [], name
            float32 = name.endswith("32") or (name == "apply_mask" and "float32" in str(signature))
            if float32:
                ir = fresh.inspect_llvm(signature)
                body = ir[ir.index("define") :]  # (past the module's declarations)
                assert not widened.search(body), (name, widened.search(body))


# -- numba's cache --------------------------------------------------------------------------


@needs_numba
def test_the_kernels_cache_in_the_user_directory_or_compile_uncached(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the package's own ``__pycache__`` cannot take numba's cache (a read-only
    site-packages), numba's per-user directory does; where no directory can, the kernels
    compile uncached and hwrng says so. (numba picks the first locator whose directory it can
    write; here it is told which to try, as root can write anywhere.)"""
    import numba

    from hwrng._philox import _numba_kernels as kernels

    if not hasattr(numba.config, "CACHE_LOCATOR_CLASSES"):
        pytest.skip("this numba cannot be told which cache locator to use")
    monkeypatch.delenv(compiled.SETTING, raising=False)
    monkeypatch.setattr(kernels, "cache_error", None)
    monkeypatch.setattr(kernels, "cache_dir", kernels.cache_dir)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(numba.config, "CACHE_LOCATOR_CLASSES", "UserWideCacheLocator")
    out = np.zeros(8, dtype=np.bool_)
    starts = np.array([5], dtype=np.int64)
    key = (np.uint64(1), np.uint64(2), np.uint64(3), np.uint64(2**31))
    user_wide = kernels._kernel(kernels.bernoulli.py_func)
    user_wide(out, starts, 8, *key, np.uint64(2**31))
    assert kernels.cache_error is None
    assert list((tmp_path / "cache" / "numba").rglob("*bernoulli*.nbi"))
    assert f"(cached in {tmp_path / 'cache' / 'numba'}" in philox.cpu_path()
    again = kernels._kernel(kernels.bernoulli.py_func)  # another process, as it were
    again(out, starts, 8, *key, np.uint64(2**31))
    assert sum(again.stats.cache_hits.values()) == 1
    expected = generic.bernoulli_mask(2 * 2**32 + 1, 3, torch.arange(5, 13), 0.5)
    assert out.tolist() == expected.tolist()
    (tmp_path / "not-a-directory").write_text("")
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "not-a-directory"))
    monkeypatch.setattr(numba.config, "CACHE_LOCATOR_CLASSES", "UserProvidedCacheLocator")
    uncached = kernels._kernel(kernels.bernoulli.py_func)
    assert kernels.cache_error is not None and "no locator available" in kernels.cache_error
    uncached(out, starts, 8, *key, np.uint64(2**31))
    assert out.tolist() == expected.tolist()
    assert "(not cached: numba can write its cache nowhere here" in philox.cpu_path()
