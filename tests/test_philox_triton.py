"""The fused Triton kernel of the Philox ops computes the contract bit for bit.

Without a GPU the kernel runs in Triton's CPU interpreter (``TRITON_INTERPRET=1``, set before
Triton is imported, hence a fresh interpreter): every known answer of every op and dtype, the
generic path's values on shards of several shapes, at several block sizes (values depend on
the element's index only, so the launch grid cannot change them). Every cell of
``noxfile.py`` but 2.13 (whose CPU wheel brings no Triton) runs this file with Triton
installed; on a CUDA machine the last test compares the GPU with the CPU. What has not run
on a GPU is said in docs/invariant.md.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections import Counter
from typing import Any

import known_answers
import pytest
import torch

import hwrng
from hwrng import _philox as philox
from hwrng._philox import _distributions as generic_path
from hwrng._philox import _triton as fused


def test_the_fused_module_imports_and_says_why_not() -> None:
    reason = fused.why_unavailable("cpu")
    assert fused.available("cpu") is (reason is None)
    assert fused.available("meta") is False
    # the kernel's wrappers serve only where it is available; they refuse elsewhere
    dims = [torch.tensor([1, 3], device="meta"), torch.arange(4, device="meta")]
    for call in (
        lambda: fused.uniform(1, 4, dims, (5, 4), torch.float32),
        lambda: fused.normal(1, 4, dims, (5, 4), torch.float32),
        lambda: fused.bernoulli_mask(1, 4, dims, (5, 4), 0.5),
        lambda: fused.trunc_normal(1, 4, dims, (5, 4), torch.float32),
    ):
        with pytest.raises(hwrng.InvalidDeviceError, match="cannot serve meta"):
            call()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_a_shard_the_kernel_cannot_serve_takes_the_generic_path(dtype: torch.dtype) -> None:
    dims, shape = (torch.tensor([1, 3]), torch.tensor([0, 2, 3])), (5, 4)
    shard, index = philox.ShardIndices(dims, shape), philox.flat_index(dims, shape)
    if fused.available("cpu"):
        pytest.skip("the kernel serves CPU tensors here (TRITON_INTERPRET=1)")
    expected = {
        "uniform": generic_path.uniform(3, 8, index, dtype, low=-1.0, high=2.0),
        "normal": generic_path.normal(3, 8, index, dtype, mean=1.0, std=2.0),
        "trunc_normal": generic_path.trunc_normal(3, 8, index, dtype, a=-1.0, b=1.0),
        "bernoulli": generic_path.bernoulli_mask(3, 8, index, 0.25),
    }
    got = {
        "uniform": philox.uniform(3, 8, shard, dtype, low=-1.0, high=2.0),
        "normal": philox.normal(3, 8, shard, dtype, mean=1.0, std=2.0),
        "trunc_normal": philox.trunc_normal(3, 8, shard, dtype, a=-1.0, b=1.0),
        "bernoulli": philox.bernoulli_mask(3, 8, shard, 0.25),
    }
    for name, values in expected.items():
        assert torch.equal(got[name], values), name


INTERPRETED = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from hwrng import _philox
from hwrng._philox import _distributions as generic
from hwrng._philox import _triton as fused
from known_answers import bits_of as bits, mismatches

assert fused.available("cpu"), fused.why_unavailable("cpu")
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}

# 1. every known answer, by the kernel (a described shard) and the generic path (a flat index)
wrong = mismatches("cpu")
assert not wrong, ("known answers", wrong)

# 2. the generic path's values on shards of several shapes
T = torch.tensor
shards = [
    ([T([0, 2, 3]), torch.arange(1, 6)], (4, 7)),
    ([T([1]), T([0, 3]), T([2, 5, 6]), torch.arange(2), T([1, 4])], (2, 4, 7, 3, 5)),
    ([torch.arange(0, 40, 3), T([9, 8, 1, 0])], (41, 10)),
    ([], ()),
]
seed, position = 2**63 + 5, 2**40 + 4096
operations = {
    "uniform": [{"low": 0.0, "high": 1.0}, {"low": -1.0, "high": 2.5}],
    "normal": [{"mean": 0.5, "std": 3.0}],
    "trunc_normal": [{"a": -2.0, "b": 2.0}, {"mean": 1.0, "std": 2.0, "a": 4.0, "b": 30.0}],
}
for dims, shape in shards:
    index = _philox.flat_index(dims, shape)
    for op, settings in operations.items():
        for parameters in settings:
            for dtype in DTYPES.values():
                expected = getattr(generic, op)(seed, position, index, dtype, **parameters)
                fast = getattr(fused, op)(seed, position, dims, shape, dtype, **parameters)
                assert bits(expected) == bits(fast), (op, shape, dtype, parameters)
                chosen = getattr(_philox, op)(
                    seed, position, _philox.ShardIndices(tuple(dims), shape), dtype, **parameters
                )
                assert bits(chosen) == bits(expected), ("chosen", op, shape, dtype)
    probabilities = [0.0, 0.3, 1.0]
    if index.dim():
        probabilities += [torch.rand(index.shape[-1:]),
                          torch.rand(index.shape[-1:], dtype=torch.float64)]
    for p in probabilities:
        expected = generic.bernoulli_mask(7, 8, index, p)
        assert torch.equal(expected, fused.bernoulli_mask(7, 8, dims, shape, p)), ("mask", shape)

# 3. the block size (and so the launch grid) does not change a value
dims, shape = [torch.arange(3, 29), torch.arange(0, 13)], (30, 13)
for op, parameters in (("uniform", {"low": -1.0, "high": 2.5}), ("normal", {}),
                       ("trunc_normal", {"a": -1.0, "b": 3.0})):
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        first = bits(getattr(fused, op)(11, 2**33, dims, shape, dtype, **parameters))
        original = fused._BLOCK
        try:
            for block in (16, 128, 1024):
                fused._BLOCK = block
                again = getattr(fused, op)(11, 2**33, dims, shape, dtype, **parameters)
                assert bits(again) == first, (op, dtype, block)
        finally:
            fused._BLOCK = original
        # int64 element positions (shards of 2**31 elements or more) give the same bits
        try:
            fused._WIDE_FROM = 0
            wide = getattr(fused, op)(11, 2**33, dims, shape, dtype, **parameters)
            assert bits(wide) == first, (op, dtype, "wide")
        finally:
            fused._WIDE_FROM = 2**31

# 4. both layouts -- by Philox blocks (each block computed once, its values written where they
# fall) and by element -- on runs that start inside a block, runs whose starts fall at every
# offset of a block, lengths that are not multiples of a block, more outer dims than the kernel
# reads, and a scattered last dim; int32 and int64 positions; with the host's ranges or without
def ranges_of(vector):
    runs = []
    for value in vector.tolist():
        if runs and runs[-1][0] + runs[-1][1] == value:
            runs[-1][1] += 1
        else:
            runs.append([value, 1])
    return tuple((start, length) for start, length in runs)

layouts = [
    ([torch.arange(3, 29), torch.arange(0, 13)], (30, 13)),
    ([torch.arange(0, 37), torch.arange(3, 12)], (40, 13)),
    ([torch.arange(1, 6), torch.arange(2, 4), torch.arange(0, 7)], (6, 5, 7)),
    ([T([4, 1]), torch.arange(5), T([0, 2]), torch.arange(1, 3), T([1]), torch.arange(2, 5)],
     (5, 6, 3, 4, 2, 6)),
    ([torch.arange(5), T([6, 1, 3])], (5, 7)),
]
seed, position = 2**64 - 3, 2**62 + 8
for runs_from, wide_from in ((1, 2**31), (2**62, 2**31), (8, 0)):
    fused._RUNS_FROM, fused._WIDE_FROM = runs_from, wide_from
    for dims, shape in layouts:
        index = _philox.flat_index(dims, shape)
        ranges = tuple(ranges_of(v) for v in dims)
        for op, parameters in (("uniform", {"low": -1.0, "high": 2.5}),
                               ("normal", {"mean": 0.5, "std": 2.0}),
                               ("trunc_normal", {"a": -1.0, "b": 3.0})):
            for dtype in (torch.float32, torch.float64, torch.bfloat16):
                expected = bits(getattr(generic, op)(seed, position, index, dtype, **parameters))
                fast = getattr(fused, op)(seed, position, dims, shape, dtype, **parameters)
                assert bits(fast) == expected, (op, shape, dtype, runs_from, wide_from)
                hosted = getattr(fused, op)(
                    seed, position, dims, shape, dtype, ranges=ranges, **parameters)
                assert bits(hosted) == expected, (op, shape, dtype, "ranges")
        for p in (0.3, torch.rand(index.shape[-1:]), torch.rand(index.shape)):
            expected = generic.bernoulli_mask(seed, position, index, p)
            assert torch.equal(fused.bernoulli_mask(seed, position, dims, shape, p), expected)
        # dropout in one pass: the mask, x * scale and x * 0 (-0, NaN) as the generic path (a
        # NaN's bits are the device's, and torch's CPU differs between its own code paths)
        specials = torch.tensor([-1.5, float("inf"), float("nan"), 3.0, -0.0, 0.1])
        source = specials[torch.arange(index.numel()) % 6].reshape(index.shape)
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            x = source.to(dtype)
            out, kept = generic.dropout(seed, position, index, x, 0.3)
            fast, fast_kept = fused.dropout(seed, position, dims, shape, x, 0.3, ranges=ranges)
            nan = torch.isnan(out)
            assert torch.equal(torch.isnan(fast), nan) and torch.equal(fast_kept, kept), dtype
            assert bits(fast[~nan]) == bits(out[~nan]), ("dropout", dtype)
fused._RUNS_FROM, fused._WIDE_FROM = 8, 2**31

# 5. SQRT(+0) and SQRT(-0) are +0 in the kernel's float32 and float64 square roots
tl = fused.tl

@fused.triton.jit
def roots(x_ptr, y_ptr, X_ptr, Y_ptr):
    offs = tl.arange(0, 4)
    tl.store(y_ptr + offs, fused._sqrt32(tl.load(x_ptr + offs)))
    tl.store(Y_ptr + offs, fused._sqrt64(tl.load(X_ptr + offs)))

x = torch.tensor([0.0, -0.0, 4.0, 2.0])
X = x.double()
y, Y = torch.empty_like(x), torch.empty_like(X)
roots[(1,)](x, y, X, Y)
from hwrng._philox import _math, _math32
assert bits(y) == bits(_math32.sqrt(x)) and bits(y)[:2] == [0, 0], bits(y)
assert bits(Y) == bits(_math.sqrt(X)) and bits(Y)[:2] == [0, 0], bits(Y)
print("ok")
"""


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None,
    reason="Triton is not installed: the fused CUDA kernel is checked in Triton's CPU "
    "interpreter where it is (every cell of noxfile.py but 2.13), and against the "
    "CPU on a GPU by the cuda test",
)
def test_the_fused_kernel_computes_the_contract_in_the_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run(
        [sys.executable, "-c", INTERPRETED, os.path.dirname(__file__)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device is visible")
@pytest.mark.cuda
def test_cuda_draws_the_cpus_numbers() -> None:
    dims, shape = [torch.arange(3, 700), torch.tensor([0, 5, 6, 9])], (800, 10)
    index = philox.flat_index(dims, shape)
    cuda_dims = [d.cuda() for d in dims]
    for name, draw in [
        ("uniform", lambda i, d: philox.uniform(9, 16, i, d, low=-1.0, high=2.0)),
        ("normal", lambda i, d: philox.normal(9, 16, i, d, mean=0.5, std=2.0)),
        ("trunc_normal", lambda i, d: philox.trunc_normal(9, 16, i, d, a=-1.0, b=1.5)),
    ]:
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            cpu = draw(index, dtype)
            assert torch.equal(draw(index.cuda(), dtype).cpu(), cpu), (name, dtype)
            described = draw(philox.ShardIndices(tuple(cuda_dims), shape), dtype)
            assert torch.equal(described.cpu(), cpu), (name, dtype, fused.why_unavailable("cuda"))
    for p in (0.25, torch.rand(index.shape)):
        cpu = philox.bernoulli_mask(9, 16, index, p)
        q = p.cuda() if isinstance(p, torch.Tensor) else p
        assert torch.equal(philox.bernoulli_mask(9, 16, index.cuda(), q).cpu(), cpu)
        described = philox.bernoulli_mask(9, 16, philox.ShardIndices(tuple(cuda_dims), shape), q)
        assert torch.equal(described.cpu(), cpu)


def test_the_cpu_computes_the_known_answers() -> None:
    assert known_answers.mismatches("cpu") == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device is visible")
@pytest.mark.cuda
def test_cuda_computes_the_known_answers() -> None:
    # the described shard takes the fused kernel where Triton serves CUDA, the flat index the
    # generic path's torch ops on the GPU: both must give the contract's bits
    assert known_answers.mismatches("cuda") == [], fused.why_unavailable("cuda")


# The kernel compiled for an H100/H200 (sm_90) without a GPU: Triton's NVIDIA backend runs on the
# CPU. Its PTX must hold IEEE-rounded float operations only. The interpreter cannot see this (it
# divides with NumPy): on an H200, float32 division through ``tl.math.fdiv(ieee_rounding=True)``
# compiled to the approximate ``div.full.f32`` and broke 7 known-answer cases.
_ROUNDED = re.compile(
    r"(add|sub|mul|div)\.rn\.f(32|64)"  # explicit rounding: ptxas never contracts these
    r"|(neg|abs|min|max|selp|mov)\.f(32|64)"  # exact
    r"|setp\.[a-z]+\.f(32|64)"  # comparisons
    r"|cvt\.rn\.f(16|32|64)\.[su](32|64)|cvt\.rn\.f16\.f32"  # rounded conversions
    r"|cvt\.f64\.f32|cvt\.f32\.b?f16"  # exact widenings (dropout's half inputs)
)


def _float_instructions(ptx: str) -> Counter[str]:
    mnemonics = re.findall(r"^\s*(?:@!?%p\d+\s+)?([a-z][a-z0-9_.]*)", ptx, re.MULTILINE)
    return Counter(m for m in mnemonics if re.search(r"\.(f16|bf16|f32|f64)(\.|$)", m))


def _not_rounded(ptx: str) -> dict[str, int]:
    return {m: n for m, n in _float_instructions(ptx).items() if not _ROUNDED.fullmatch(m)}


def _sm90_ptx(function: Any, signature: dict[str, str], constants: dict[str, Any]) -> str:
    """``function`` compiled for sm_90 with contraction off, as the launch does; its PTX."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(function.arg_names)
    source = ASTSource(
        function, signature, constexprs={(names.index(k),): v for k, v in constants.items()}
    )
    compiled = fused.triton.compile(
        source, target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": False}
    )
    return str(compiled.asm["ptx"])


def _nvidia_backend_or_skip() -> None:
    if fused.triton is None:
        pytest.skip("Triton is not installed (every cell of noxfile.py but 2.13 has it)")
    from triton.backends import backends

    if "nvidia" not in backends:
        pytest.skip("this Triton has no NVIDIA backend")


def test_the_ptx_check_flags_approximate_float_operations() -> None:
    _nvidia_backend_or_skip()
    tl = fused.tl

    @fused.triton.jit
    def approximate(out_ptr, x_ptr, BLOCK: fused.tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        tl.store(out_ptr + offs, tl.math.fdiv(x, x + 3.0) + tl.sqrt(x))

    signature = {"out_ptr": "*fp32", "x_ptr": "*fp32", "BLOCK": "constexpr"}
    flagged = _not_rounded(_sm90_ptx(approximate, signature, {"BLOCK": 128}))
    assert any(m.startswith("div.") for m in flagged), flagged
    assert any(m.startswith("sqrt.") for m in flagged), flagged


#: (name, kind, output pointer, unit interval, int64 positions, by Philox blocks, one run): every
#: float computation of the kernel (the per-word ones are the same code in both layouts; the
#: normal's are not), every output dtype's rounding, and both layouts' integer code
KERNEL_VARIANTS = [
    ("uniform float32", fused._UNIFORM32, "*fp32", False, False, True, False),
    ("uniform bfloat16, by element", fused._UNIFORM32, "*bf16", False, False, False, False),
    ("uniform float16 [0, 1), one run", fused._UNIFORM32, "*fp16", True, False, True, True),
    ("uniform float64", fused._UNIFORM64, "*fp64", False, False, True, False),
    ("normal float32", fused._NORMAL32, "*fp32", False, False, True, False),
    ("normal float32, by element", fused._NORMAL32, "*fp32", False, False, False, False),
    ("normal float32, 2**31 or more", fused._NORMAL32, "*fp32", False, True, True, False),
    ("normal bfloat16, one run", fused._NORMAL32, "*bf16", False, False, True, True),
    ("normal float64", fused._NORMAL64, "*fp64", False, False, True, False),
    ("normal float64, by element", fused._NORMAL64, "*fp64", False, True, False, False),
    ("bernoulli", fused._BERNOULLI, "*i1", False, False, True, False),
    ("bernoulli per element, by element", fused._BERNOULLI_P, "*i1", False, False, False, False),
    ("trunc_normal float32", fused._TRUNC32, "*fp32", False, False, True, False),
    ("trunc_normal float16, by element", fused._TRUNC32, "*fp16", False, False, False, False),
    ("trunc_normal float64", fused._TRUNC64, "*fp64", False, False, True, False),
    ("dropout float32", fused._DROPOUT, "*fp32", False, False, True, True),
    ("dropout bfloat16, by element", fused._DROPOUT, "*bf16", False, False, False, False),
    ("dropout float64", fused._DROPOUT, "*fp64", False, False, True, False),
]


@pytest.mark.parametrize(
    ("kind", "out", "unit", "wide", "runs", "one_run"),
    [v[1:] for v in KERNEL_VARIANTS],
    ids=[v[0] for v in KERNEL_VARIANTS],
)
def test_every_kernel_variant_compiles_to_ieee_rounded_ptx(
    kind: int, out: str, unit: bool, wide: bool, runs: bool, one_run: bool
) -> None:
    _nvidia_backend_or_skip()
    names = list(fused._kernel.arg_names)
    constants = {"KIND": kind, "BLOCK_SHIFT": 2, "SHIFT": 8, "UNIT": unit, "BLOCK": 256}
    constants.update(WIDE=wide, RUNS=runs, ONE_RUN=one_run, LEAD=1 if one_run else 0)
    if kind in (fused._UNIFORM64, fused._NORMAL64, fused._TRUNC64):
        constants.update(BLOCK_SHIFT=1, SHIFT=0)
    signature = {}
    for name in names:
        if name in constants:
            signature[name] = "constexpr"
        elif name in ("out_ptr", "x_ptr"):
            signature[name] = out
        elif name == "m_ptr":
            signature[name] = "*i1"
        elif name.endswith("_ptr"):
            signature[name] = "*i64"
        else:
            signature[name] = "i32" if name in ("shift", "mirror") else "i64"
    ptx = _sm90_ptx(fused._kernel, signature, constants)
    assert _not_rounded(ptx) == {}
    if kind not in (fused._BERNOULLI, fused._BERNOULLI_P):
        assert _float_instructions(ptx), "no float operation found: the PTX scan reads nothing"


def test_the_kernel_computes_each_philox_block_once() -> None:
    # uniform float32 over one aligned run, as the sm_90 PTX says: 256 blocks a program of 4 warps
    # is 2 blocks a thread, each 10 rounds of 2 high products (20 mul.hi, fewer where constant),
    # and all 8 values they yield stored as two 16-byte vectors; before, every value computed its
    # own block (39 mul.hi for a thread's 2 values)
    _nvidia_backend_or_skip()
    names = list(fused._kernel.arg_names)
    constants = {"KIND": fused._UNIFORM32, "BLOCK_SHIFT": 2, "SHIFT": 8, "UNIT": True}
    constants.update(BLOCK=256, WIDE=False, RUNS=True, ONE_RUN=True, LEAD=0)
    signature = {}
    for name in names:
        if name in constants:
            signature[name] = "constexpr"
        else:
            signature[name] = (
                "*fp32" if name == "out_ptr" else "*i64" if name.endswith("_ptr") else "i32"
            )
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    aligned = ("out_ptr", "total", "length")  # as a launch specialises them (multiples of 16)
    source = ASTSource(
        fused._kernel,
        signature,
        constexprs={(names.index(k),): v for k, v in constants.items()},
        attrs={(names.index(n),): [["tt.divisibility", 16]] for n in aligned},
    )
    compiled = fused.triton.compile(
        source, target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": False}
    )
    instructions = Counter(
        re.findall(r"^\s*(?:@!?%p\d+\s+)?([a-z][a-z0-9_.]*)", str(compiled.asm["ptx"]), re.M)
    )
    assert instructions["mul.hi.u32"] <= 2 * 20, instructions["mul.hi.u32"]
    stores = {m: n for m, n in instructions.items() if m.startswith("st.global")}
    assert stores == {"st.global.v4.b32": 2}, stores


def _launch_binder() -> Any:
    """Triton's own reading of a launch's arguments into the key it compiles by (sm_90)."""
    _nvidia_backend_or_skip()
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime import jit

    if not hasattr(jit, "create_function_from_signature"):
        pytest.skip("this Triton binds launch arguments otherwise (checked with Triton 3.6)")
    backend = make_backend(GPUTarget("cuda", 90, 32))
    kernel = fused._kernel
    return jit.create_function_from_signature(kernel.signature, kernel.params, backend)


class _Recorder:
    """Stands for the kernel in ``_launch``: keeps each launch's arguments, runs nothing."""

    def __init__(self) -> None:
        self.launches: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __getitem__(self, grid: object) -> Any:
        return lambda *args, **kwargs: self.launches.append((args, kwargs))


def _limit(x: float) -> int:
    """A Bernoulli threshold from ``x`` in [-1, 3.5]: 0 to 2**32, on both sides of 2**31."""
    return round((x + 1.0) / 4.5 * 2**32)


def test_one_compilation_serves_every_seed_position_and_parameter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Triton types an unannotated int by its value (i32 below 2**31, else i64) and compiles
    # once per type: a seed, position or parameter across that line compiled the kernel again,
    # 0.4 to 1.6 s each on a GPU (the GPU acceptance's contract step compiled about 224)
    binder = _launch_binder()
    recorder = _Recorder()
    monkeypatch.setattr(fused, "_kernel", recorder)
    shard = philox.ShardIndices((torch.arange(4), torch.arange(8)), (4, 8))
    cpu = torch.device("cpu")
    values = [(1, 0, 0.0), (2**31 + 1, 2**40, -1.0), (2**64 - 1, 2**62 + 4, 3.5)]
    launches = {
        "uniform float64": lambda s, p, x: fused._launch(
            fused._UNIFORM64, s, p, shard, dtype=torch.float64, device=cpu, a=x, b=x + 1
        ),
        "normal float32": lambda s, p, x: fused._launch(
            fused._NORMAL32, s, p, shard, dtype=torch.float32, device=cpu, a=x, b=-x
        ),
        "bernoulli": lambda s, p, x: fused._launch(
            fused._BERNOULLI, s, p, shard, dtype=torch.bool, device=cpu, threshold=_limit(x)
        ),
    }
    for name, launch in launches.items():
        recorder.launches.clear()
        for seed, position, parameter in values:
            launch(seed, position, parameter)
        keys = set()
        for args, kwargs in recorder.launches:
            arguments = {k: v for k, v in kwargs.items() if k != "enable_fp_fusion"}
            _, specialization, _ = binder(*args, **arguments)
            keys.add(repr(specialization))
        assert len(recorder.launches) == len(values)
        assert len(keys) == 1, (name, keys)
