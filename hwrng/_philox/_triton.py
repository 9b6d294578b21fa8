# mypy: disallow-untyped-decorators=False, disallow-untyped-defs=False, disallow-untyped-calls=False
# (Triton kernels take untyped, specialised parameters; the public functions are fully typed.)
# ruff: noqa: PLR0917
# (Triton device functions take their operands and constants positionally.)
"""A fused Triton kernel of the Philox ops for CUDA: every distribution and dropout, one pass each.

One launch computes a local shard's values straight from the shard's per-dim
global index vectors and writes them to the output: no int64 index tensor of
the shard, no table of words, no temporaries. Up to four dims are read as
they are; leading dims beyond four are collapsed into one vector whose length
is the product of their local sizes (never the shard's size).

A program computes 256 Philox blocks and writes every value each yields
(four for the 32-bit-word dtypes, two for float64) that the shard holds, as
torch's and cuRAND's kernels use a block's four words: the shard is read as
runs of consecutive global indices (``ShardIndices.run_layout``), a run's
first and last blocks partly written. A shard of one run whose first element
starts a block stores 16-byte vectors with no shuffle between threads. Only a
shard whose runs are shorter than ``_RUNS_FROM`` elements (a scattered last
dim) is computed element by element, each value its whole block. Dropout
reads the input, draws the mask and writes the output and the mask in the
same pass.

The counter layout (:mod:`hwrng._philox._bits`), the bit-to-float mapping
and every float operation are those of the generic path
(:mod:`hwrng._philox._distributions`, the contract in ``docs/invariant.md``)
-- the same IEEE operations in the same order: float32 alone for float32,
float16 and bfloat16 results. Where Triton would approximate, the kernel says
how to round: FP contraction is off (``enable_fp_fusion=False``: no fused
multiply-add); every float32 division is ``tl.math.div_rn`` (Triton's ``/``
on float32 is ``div.full.f32``, off by up to 2 ulp, and Triton up to at least
3.6 ignores ``tl.math.fdiv``'s ``ieee_rounding=True``, triton-lang/triton#10073:
on an H200 that flag left 7 of the 51 known-answer cases wrong, float32
normal and truncated normal); float64 division is Triton's ``/``
(``div.rn.f64``); and no library function is called (no ``tl.sqrt``, whose
float32 form is approximate: hwrng's Newton square root instead). So
the values are bit-identical to the generic path's. The float32-to-bfloat16
rounding is done on the bits (round to nearest even, as torch does), so it
does not depend on the backend's conversion instruction either. Float
parameters travel as their bit patterns (float32 or float64), never as
Python floats (which Triton would pass as float32).

Each element's values depend on its global index alone: the launch grid and
the block size (``BLOCK``) only decide which program computes an element,
so they never change its value (tested at several block sizes); nor does the
GPU's number of SMs or a MIG slice, which only change how many programs run
at once.

Triton is optional: this module imports without it, and ``available()`` then
says False; the wrappers serve only where ``available()`` is True (the choice
of the generic path elsewhere is :mod:`hwrng._philox._choose`'s). With
``TRITON_INTERPRET=1`` set before this module is imported, the kernel runs in
Triton's CPU interpreter on CPU tensors (slowly; that is how it is tested
without a GPU).
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hwrng._exceptions import InvalidDeviceError, InvalidValueError
from hwrng._philox import _math, _math32
from hwrng._philox._bits import DOMAIN_FLAG
from hwrng._philox._index import Ranges, ShardIndices, flat_index_of_checked, index_shape
from hwrng._philox._parameters import (
    PRECISION,
    checked_seed_position,
    dropout_parameters,
    normal_parameters,
    probabilities_broadcast,
    probability,
    trunc_normal_parameters,
    uniform_parameters,
)

try:
    import triton  # type: ignore[import-not-found, import-untyped, unused-ignore]
    import triton.language as tl  # type: ignore[import-not-found, import-untyped, unused-ignore]
except Exception as error:  # a broken install is as good as none
    triton = None
    tl = None
    _MISSING: str | None = f"triton cannot be imported ({type(error).__name__}: {error})"
else:
    _MISSING = None

__all__ = [
    "MAX_DIMS",
    "available",
    "bernoulli_mask",
    "dropout",
    "normal",
    "trunc_normal",
    "uniform",
    "why_unavailable",
]

#: The kernel reads up to this many per-dim index vectors (more dims are collapsed to fit).
MAX_DIMS = 4

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
# elements a program computes (a shard of short runs), and Philox blocks (a shard of runs)
_BLOCK = 4096 if _INTERPRET else 256
_RUN_BLOCK = 1024 if _INTERPRET else 256
# runs from this many elements share their blocks (tests lower it)
_RUNS_FROM = 8
# Shards from this many elements (plus a block) index their elements in int64 (tests lower it).
_WIDE_FROM = 2**31

# what the kernel computes (a constexpr)
(
    _UNIFORM32, _UNIFORM64, _NORMAL32, _NORMAL64, _BERNOULLI, _BERNOULLI_P, _TRUNC32, _TRUNC64,
    _DROPOUT,
) = range(9)  # fmt: skip


def why_unavailable(device: torch.device | str | None = None) -> str | None:
    """Why the fused kernel cannot serve ``device``, or None when it can.

    Parameters
    ----------
    device : torch.device or str, optional
        The output's device (default: CUDA).

    Returns
    -------
    str or None
        The reason, or None.
    """
    if _MISSING is not None:
        return _MISSING
    where = torch.device("cuda" if device is None else device)
    if _INTERPRET:
        return None if where.type == "cpu" else "under TRITON_INTERPRET=1 only CPU tensors"
    if where.type != "cuda":
        return f"the kernel drives CUDA devices, not {where.type}"
    if not torch.cuda.is_available():
        return "no CUDA device is visible"
    if torch.version.hip is not None:
        return "ROCm has not been checked for bit-identical results"
    return None


def available(device: torch.device | str | None = None) -> bool:
    """Whether the fused kernel can compute values on ``device``.

    Parameters
    ----------
    device : torch.device or str, optional
        The output's device (default: CUDA).

    Returns
    -------
    bool
        True with Triton and a CUDA device (or, under ``TRITON_INTERPRET=1``,
        for CPU tensors).
    """
    return why_unavailable(device) is None


if triton is not None:
    _M0 = tl.constexpr(0xD2511F53)
    _M1 = tl.constexpr(0xCD9E8D57)
    _W0 = tl.constexpr(0x9E3779B9)
    _W1 = tl.constexpr(0xBB67AE85)
    # float32 constants of _math32 (exact float32 values)
    _LN2_HI = tl.constexpr(_math32.LN2_HI)
    _LN2_LO = tl.constexpr(_math32.LN2_LO)
    _G0, _G1, _G2 = (tl.constexpr(c) for c in _math32.LN_G)
    _S0, _S1, _S2, _S3 = (tl.constexpr(c) for c in _math32.SIN_S)
    _C0, _C1, _C2, _C3 = (tl.constexpr(c) for c in _math32.COS_C)
    _CA0, _CA1, _CA2, _CA3, _CA4 = (tl.constexpr(c) for c in _math32.NDTRI_CENTRAL_A)
    _CB0, _CB1, _CB2, _CB3, _CB4 = (tl.constexpr(c) for c in _math32.NDTRI_CENTRAL_B)
    _NA0, _NA1, _NA2, _NA3, _NA4 = (tl.constexpr(c) for c in _math32.NDTRI_NEAR_A)
    _NB0, _NB1, _NB2, _NB3, _NB4 = (tl.constexpr(c) for c in _math32.NDTRI_NEAR_B)
    _FA0, _FA1, _FA2, _FA3, _FA4 = (tl.constexpr(c) for c in _math32.NDTRI_FAR_A)
    _FB0, _FB1, _FB2, _FB3, _FB4 = (tl.constexpr(c) for c in _math32.NDTRI_FAR_B)
    _R0 = tl.constexpr(_math32.R0)
    _LIMIT = tl.constexpr(_math32.CENTRAL_LIMIT)
    _SQRT_SEED = tl.constexpr(_math32.SQRT_SEED)
    # float64 constants of _math
    _LN2_HI64 = tl.constexpr(_math.LN2_HI)
    _LN2_LO64 = tl.constexpr(_math.LN2_LO)
    _SQRT_SEED64 = tl.constexpr(_math.SQRT_SEED)
    _SQRT_HALF_BITS64 = tl.constexpr(0x3FE6A09E667F3BCD)
    _LG0, _LG1, _LG2, _LG3, _LG4, _LG5, _LG6 = (tl.constexpr(c) for c in _math.LN_G)
    _SH0, _SH1, _SH2, _SH3, _SH4, _SH5, _SH6, _SH7, _SH8 = (tl.constexpr(c) for c in _math.SIN_H)
    _A0, _A1, _A2, _A3, _A4, _A5, _A6, _A7 = (tl.constexpr(c) for c in _math.NDTRI_A)
    _B0, _B1, _B2, _B3, _B4, _B5, _B6, _B7 = (tl.constexpr(c) for c in _math.NDTRI_B)
    _C0_, _C1_, _C2_, _C3_, _C4_, _C5_, _C6_, _C7_ = (tl.constexpr(c) for c in _math.NDTRI_C)
    _D0, _D1, _D2, _D3, _D4, _D5, _D6, _D7 = (tl.constexpr(c) for c in _math.NDTRI_D)
    _E0, _E1, _E2, _E3, _E4, _E5, _E6, _E7 = (tl.constexpr(c) for c in _math.NDTRI_E)
    _F0, _F1, _F2, _F3, _F4, _F5, _F6, _F7 = (tl.constexpr(c) for c in _math.NDTRI_F)

    @triton.jit
    def _philox_rounds(c0, c1, c2, c3, k0, k1):
        """Philox4x32-10 on uint32 tensors (uint32 products wrap; umulhi is the high word)."""
        for _ in tl.static_range(10):
            hi0 = tl.umulhi(c0, _M0)
            lo0 = c0 * _M0
            hi1 = tl.umulhi(c2, _M1)
            lo1 = c2 * _M1
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
            k0 = k0 + _W0
            k1 = k1 + _W1
        return c0, c1, c2, c3

    @triton.jit
    def _f64(bits):
        """The float64 whose bit pattern is the integer ``bits``."""
        return bits.to(tl.int64).to(tl.float64, bitcast=True)

    @triton.jit
    def _f32(bits):
        """The float32 whose bit pattern is the integer ``bits``."""
        return bits.to(tl.int32).to(tl.float32, bitcast=True)

    @triton.jit
    def _word(e, x0, x1, x2, x3):
        """Word ``e % 4`` of the block."""
        lane = e & 3
        return tl.where(lane == 0, x0, tl.where(lane == 1, x1, tl.where(lane == 2, x2, x3)))

    @triton.jit
    def _bits53(a, b):
        return ((a.to(tl.int64) >> 5) << 26) | (b.to(tl.int64) >> 6)

    # Each float operation below is one IEEE operation, rounded to nearest: FP contraction is
    # off at the launch (enable_fp_fusion=False), division is IEEE (``_div32``, ``_div``: Triton's
    # ``/`` is an approximate division for float32), and no library function is called.

    @triton.jit
    def _div32(x, y):
        """float32 ``x / y`` rounded to nearest (``div.rn.f32`` on NVIDIA GPUs)."""
        return tl.math.div_rn(x, y)

    @triton.jit
    def _div(x, y):
        """float64 ``x / y`` rounded to nearest: Triton's float64 ``/`` is ``div.rn.f64``.

        (Not ``tl.math.fdiv(..., ieee_rounding=True)``: from Triton 3.8 that asks for the
        float32 intrinsic and fails to compile for float64.)
        """
        return x / y

    @triton.jit
    def _horner4(x, c0: tl.constexpr, c1: tl.constexpr, c2: tl.constexpr, c3: tl.constexpr):
        acc = x * c3
        acc = acc + c2
        acc = acc * x
        acc = acc + c1
        acc = acc * x
        return acc + c0

    @triton.jit
    def _horner5(
        x,
        c0: tl.constexpr,
        c1: tl.constexpr,
        c2: tl.constexpr,
        c3: tl.constexpr,
        c4: tl.constexpr,
    ):
        acc = x * c4
        acc = acc + c3
        acc = acc * x
        acc = acc + c2
        acc = acc * x
        acc = acc + c1
        acc = acc * x
        return acc + c0

    @triton.jit
    def _horner3(x, c0: tl.constexpr, c1: tl.constexpr, c2: tl.constexpr):
        acc = x * c2
        acc = acc + c1
        acc = acc * x
        return acc + c0

    @triton.jit
    def _sqrt32(v):
        """``_math32.sqrt``: Newton's iteration from a bit-level guess (sqrt(+-0) = +0)."""
        bits = v.to(tl.int32, bitcast=True)
        y = _f32((bits >> 1) + _SQRT_SEED)
        for _ in tl.static_range(3):
            y = _div32(v, y) + y
            y = y * 0.5
        return tl.where((bits & 0x7FFFFFFF) == 0, 0.0, y)

    @triton.jit
    def _ln32(x, shift):
        """``_math32.ln``: ``ln(x * 2**shift)`` for positive normal float32 ``x``."""
        bits = x.to(tl.int32, bitcast=True)
        k = (bits - 0x3F3504F3) >> 23
        z = _f32(bits - (k << 23))
        e = (k + shift).to(tl.float32)
        f = z - 1.0
        s = _div32(f, f + 2.0)
        w = s * s
        tail = _horner3(w, _G0, _G1, _G2) * w
        half_square = (f * f) * 0.5
        inner = (half_square + tail) * s
        inner = inner + e * _LN2_LO
        out = f - (half_square - inner)
        return out + e * _LN2_HI

    @triton.jit
    def _sincos24(k):
        """``_math32.sincos_turns``: sine and cosine of ``2 pi k / 2**24``."""
        quadrant = k >> 22
        m = k & 0x3FFFFF
        folded = m >= 0x200000
        t = tl.where(folded, 0x400000 - m, m).to(tl.float32) * (2.0**-22)
        w = t * t
        sin_t = _horner4(w, _S0, _S1, _S2, _S3) * t
        sin_t = sin_t + t * 1.5
        cos_t = _horner4(w, _C0, _C1, _C2, _C3) * w
        cos_t = cos_t + 1.0
        swap = folded ^ ((quadrant & 1) == 1)
        sin = tl.where(swap, cos_t, sin_t)
        cos = tl.where(swap, sin_t, cos_t)
        sin = tl.where(quadrant >= 2, -sin, sin)
        cos = tl.where((quadrant == 1) | (quadrant == 2), -cos, cos)
        return sin, cos

    @triton.jit
    def _ndtri_tail32(t):
        """``_math32.ndtri_tail``: ``-Phi^-1(p)`` from ``t = sqrt(-ln p)``."""
        near = t - 1.625
        far = t - 5.0
        y_near = _div32(
            _horner5(near, _NA0, _NA1, _NA2, _NA3, _NA4),
            _horner5(near, _NB0, _NB1, _NB2, _NB3, _NB4),
        )
        y_far = _div32(
            _horner5(far, _FA0, _FA1, _FA2, _FA3, _FA4),
            _horner5(far, _FB0, _FB1, _FB2, _FB3, _FB4),
        )
        return tl.where(t > 5.0, y_far, y_near)

    @triton.jit
    def _ndtri_central32(q):
        """``_math32.ndtri_central``: ``Phi^-1(1/2 + q)`` for ``|q| <= 0.425``."""
        r = _R0 - q * q
        a = q * _horner5(r, _CA0, _CA1, _CA2, _CA3, _CA4)
        return _div32(a, _horner5(r, _CB0, _CB1, _CB2, _CB3, _CB4))

    @triton.jit
    def _horner7(
        x,
        c0: tl.constexpr,
        c1: tl.constexpr,
        c2: tl.constexpr,
        c3: tl.constexpr,
        c4: tl.constexpr,
        c5: tl.constexpr,
        c6: tl.constexpr,
    ):
        acc = _horner5(x, c2, c3, c4, c5, c6)
        acc = acc * x
        acc = acc + c1
        acc = acc * x
        return acc + c0

    @triton.jit
    def _horner8(
        x,
        c0: tl.constexpr,
        c1: tl.constexpr,
        c2: tl.constexpr,
        c3: tl.constexpr,
        c4: tl.constexpr,
        c5: tl.constexpr,
        c6: tl.constexpr,
        c7: tl.constexpr,
    ):
        acc = _horner7(x, c1, c2, c3, c4, c5, c6, c7)
        acc = acc * x
        return acc + c0

    @triton.jit
    def _horner9(
        x,
        c0: tl.constexpr,
        c1: tl.constexpr,
        c2: tl.constexpr,
        c3: tl.constexpr,
        c4: tl.constexpr,
        c5: tl.constexpr,
        c6: tl.constexpr,
        c7: tl.constexpr,
        c8: tl.constexpr,
    ):
        acc = _horner8(x, c1, c2, c3, c4, c5, c6, c7, c8)
        acc = acc * x
        return acc + c0

    @triton.jit
    def _sqrt64(v):
        """``_math.sqrt``: four Newton steps from a bit-level guess (sqrt(+-0) = +0)."""
        bits = v.to(tl.int64, bitcast=True)
        y = ((bits >> 1) + _SQRT_SEED64).to(tl.float64, bitcast=True)
        for _ in tl.static_range(4):
            y = _div(v, y) + y
            y = y * 0.5
        return tl.where((bits & 0x7FFFFFFFFFFFFFFF) == 0, 0.0, y)

    @triton.jit
    def _ln64(x):
        """``_math.ln`` (subnormals included), operation for operation."""
        small = x < 2.0**-1022
        x = tl.where(small, x * (2.0**54), x)
        bits = x.to(tl.int64, bitcast=True)
        k = (bits - _SQRT_HALF_BITS64) >> 52
        z = (bits - (k << 52)).to(tl.float64, bitcast=True)
        k = tl.where(small, k - 54, k)
        exponent = k.to(tl.float64)
        f = z - 1.0
        s = _div(f, f + 2.0)
        w = s * s
        tail = _horner7(w, _LG0, _LG1, _LG2, _LG3, _LG4, _LG5, _LG6) * w
        half_square = (f * f) * 0.5
        inner = (half_square + tail) * s + exponent * _LN2_LO64
        out = -(half_square - inner)
        out = out + f
        return out + exponent * _LN2_HI64

    @triton.jit
    def _sin_half_pi(s):
        return _horner9(s * s, _SH0, _SH1, _SH2, _SH3, _SH4, _SH5, _SH6, _SH7, _SH8) * s

    @triton.jit
    def _sincos53(k):
        """The sine and cosine of ``2 pi k / 2**53``, as ``_math.sincos_turns``."""
        quadrant = k >> 51
        s = (k & ((1 << 51) - 1)).to(tl.float64) * (2.0**-51)
        near = _sin_half_pi(s)
        far = _sin_half_pi(1.0 - s)
        odd = (quadrant & 1) == 1
        sin = tl.where(odd, far, near)
        cos = tl.where(odd, near, far)
        sin = tl.where(quadrant >= 2, -sin, sin)
        cos = tl.where((quadrant == 1) | (quadrant == 2), -cos, cos)
        return sin, cos

    @triton.jit
    def _ndtri64(p):
        """``_math.ndtri``, operation for operation."""
        q = p - 0.5
        r = 0.180625 - q * q
        a = _horner8(r, _A0, _A1, _A2, _A3, _A4, _A5, _A6, _A7) * q
        central = _div(a, _horner8(r, _B0, _B1, _B2, _B3, _B4, _B5, _B6, _B7))
        lower = q < 0
        tail_p = tl.maximum(tl.where(lower, p, 1.0 - p), 5e-324)
        t = _sqrt64(-_ln64(tail_p))
        near = t - 1.6
        far = t - 5.0
        tail = tl.where(
            t <= 5.0,
            _div(
                _horner8(near, _C0_, _C1_, _C2_, _C3_, _C4_, _C5_, _C6_, _C7_),
                _horner8(near, _D0, _D1, _D2, _D3, _D4, _D5, _D6, _D7),
            ),
            _div(
                _horner8(far, _E0, _E1, _E2, _E3, _E4, _E5, _E6, _E7),
                _horner8(far, _F0, _F1, _F2, _F3, _F4, _F5, _F6, _F7),
            ),
        )
        tail = tl.where(lower, -tail, tail)
        return tl.where(tl.abs(q) <= 0.425, central, tail)

    @triton.jit
    def _to_bf16(x):
        """float32 to bfloat16 rounding to nearest even, on the bits; NaN to 0x7FC0, as torch's."""
        bits = x.to(tl.uint32, bitcast=True)
        # NaN (dropout's x * 0 of an infinite input): x != x is the NaN test Triton compiles
        bits = tl.where(x != x, 0x7FC00000, bits)  # noqa: PLR0124
        bits = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
        return bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)

    # (one return each: the compiler also generates the code after an early return)
    @triton.jit
    def _narrow(single, out_dtype: tl.constexpr):
        """float32 to a 32-bit-word output dtype (float32, float16 or bfloat16)."""
        return _to_bf16(single) if out_dtype == tl.bfloat16 else single.to(out_dtype)

    @triton.jit
    def _trunc32(w, d, p0, upper, shift):
        """The float32 truncated normal's ``Phi^-1`` of word ``w`` (``_distributions._ndtri32``)."""
        u = (w.to(tl.int64) * 2 + 1).to(tl.float32) * (2.0**-33)
        p = u * d
        p = p + p0
        complement = ((0xFFFFFFFF - w.to(tl.int64)) * 2 + 1).to(tl.float32) * (2.0**-33)
        pc = complement * d
        pc = pc + upper
        q = p - 0.5
        lower = (q < 0.0) | (shift > 0)
        log = _ln32(tl.where(lower, p, pc), -shift)
        tail = _ndtri_tail32(_sqrt32(-log))
        tail = tl.where(lower, -tail, tail)
        central = (tl.abs(q) <= _LIMIT) & (shift == 0)
        return tl.where(central, _ndtri_central32(q), tail)

    @triton.jit
    def _lanes4(a, b, c, d):
        """``[a0, b0, c0, d0, a1, b1, ...]``: four values a block, in the blocks' order."""
        return tl.reshape(tl.join(tl.join(a, c), tl.join(b, d)), [a.shape[0] * 4])

    @triton.jit
    def _lanes2(a, b):
        """``[a0, b0, a1, b1, ...]``: two values a block, in the blocks' order."""
        return tl.reshape(tl.join(a, b), [a.shape[0] * 2])

    @triton.jit
    def _uniform32(w, scale, offset, lo, hi, SHIFT: tl.constexpr, UNIT: tl.constexpr):
        """A word's uniform value in float32: its top bits times ``2**-m``, then the interval."""
        u = (w >> SHIFT).to(tl.float32) * (2.0 ** (SHIFT - 32))
        if not UNIT:  # (the unit interval is exact in every step)
            u = u * scale
            u = u + offset
            u = tl.minimum(tl.maximum(u, lo), hi)
        return u

    @triton.jit
    def _uniform64(a, b, scale, offset, hi, UNIT: tl.constexpr):
        """The float64 uniform value of the words ``a``, ``b``."""
        u = _bits53(a, b).to(tl.float64) * (2.0**-53)
        if not UNIT:
            u = u * scale
            u = u + offset
            u = tl.minimum(u, hi)
        return u

    @triton.jit
    def _radius32(a):
        """Box-Muller's radius ``SQRT(LN(u1) * -2)`` from the word ``a``, in float32."""
        u1 = (a.to(tl.int64) + 1).to(tl.float32) * (2.0**-32)
        return _sqrt32(_ln32(u1, 0) * -2.0)

    @triton.jit
    def _radius64(a, b):
        """Box-Muller's radius from the words ``a``, ``b``, in float64."""
        u1 = (_bits53(a, b) + 1).to(tl.float64) * (2.0**-53)
        return _sqrt64(_ln64(u1) * -2.0)

    @triton.jit
    def _trunc_value32(w, d, p0, upper, shift, mirror, scale, offset, lo, hi):
        """A word's truncated normal value in float32."""
        x = _trunc32(w, d, p0, upper, shift)
        x = tl.where(mirror != 0, -x, x)
        v = x * scale
        v = v + offset
        return tl.minimum(tl.maximum(v, lo), hi)

    @triton.jit
    def _trunc_value64(a, b, d, p0, mirror, scale, offset, lo, hi):
        """The float64 truncated normal value of the words ``a``, ``b``."""
        k = ((a.to(tl.int64) >> 6) << 26) | (b.to(tl.int64) >> 6)
        u = (k * 2 + 1).to(tl.float64) * (2.0**-53)
        u = u * d
        x = _ndtri64(u + p0)
        x = tl.where(mirror != 0, -x, x)
        v = x * scale
        v = v + offset
        return tl.minimum(tl.maximum(v, lo), hi)

    # The kernel's branches are compile-time (KIND, RUNS... are constexprs): each launch
    # compiles one. Parameters that change from call to call are not specialised and have
    # a fixed type, so one compilation serves them all: Triton would otherwise pass a value
    # below 2**31 as i32 and a larger one as i64, and compile again for a seed, position or
    # parameter that crosses that line (the known answers alone compiled twice as many).
    @triton.jit(
        do_not_specialize=[
            "k0", "k1", "c2", "c3", "a_bits", "b_bits", "lo_bits", "hi_bits", "d_bits",
            "p0_bits", "upper_bits", "shift", "mirror", "threshold", "first",
        ]
    )  # fmt: skip
    def _kernel(  # noqa: PLR0912, PLR0915
        out_ptr,
        p_ptr,
        x_ptr,
        m_ptr,
        i0_ptr,
        i1_ptr,
        i2_ptr,
        i3_ptr,
        n1,
        n2,
        n3,
        s0,
        s1,
        s2,
        s3,
        ps0,
        ps1,
        ps2,
        ps3,
        total,
        first: tl.int64,
        length,
        per_run,
        k0: tl.int64,
        k1: tl.int64,
        c2: tl.int64,
        c3: tl.int64,
        a_bits: tl.int64,
        b_bits: tl.int64,
        lo_bits: tl.int64,
        hi_bits: tl.int64,
        d_bits: tl.int64,
        p0_bits: tl.int64,
        upper_bits: tl.int64,
        shift: tl.int32,
        mirror: tl.int32,
        threshold: tl.int64,
        KIND: tl.constexpr,
        BLOCK_SHIFT: tl.constexpr,
        SHIFT: tl.constexpr,
        UNIT: tl.constexpr,
        WIDE: tl.constexpr,
        RUNS: tl.constexpr,
        ONE_RUN: tl.constexpr,
        LEAD: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        """The values of a shard: per Philox block (``RUNS``) or per element.

        ``RUNS``: the shard is runs of ``length`` consecutive global indices
        (see ``ShardIndices.run_layout``), run ``r`` starting at ``first +
        sum_k i_k[j_k] * s_k``. A program computes ``BLOCK`` Philox blocks, each
        once, and writes all the values it yields (four for the 32-bit-word
        dtypes, two for float64) that fall inside its run: slot ``t`` is block
        ``t mod per_run`` of run ``t // per_run``, counted from the block of the
        run's first element. ``total`` is the number of slots.

        Otherwise a program computes ``BLOCK`` elements, each its block (a
        shard whose runs are too short to share blocks); ``total`` is the
        number of elements and the ``i_k`` span every dim.
        """
        out_dtype: tl.constexpr = out_ptr.dtype.element_ty
        if WIDE:  # 2**31 slots or elements or more: int64 positions (slow division)
            offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        else:  # int32 positions: the shard's sizes are int32 too, so no int64 division below
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = offs < total
        if RUNS and ONE_RUN:  # the values' places are consecutive: no run to look up
            block = (first >> BLOCK_SHIFT) + offs.to(tl.int64)
            if WIDE:
                place = tl.program_id(0).to(tl.int64) * (BLOCK << BLOCK_SHIFT)
            else:
                place = tl.program_id(0) * (BLOCK << BLOCK_SHIFT)
            # the first block starts LEAD values before the run (0: the stores are aligned)
            where = place + tl.arange(0, BLOCK << BLOCK_SHIFT) - LEAD
            mask = where < length if LEAD == 0 else (where >= 0) & (where < length)
        elif RUNS:
            run = offs // per_run
            j3 = run % n3
            rest = run // n3
            j2 = rest % n2
            rest = rest // n2
            j1 = rest % n1
            j0 = rest // n1
            start = (
                tl.load(i0_ptr + j0, mask=live, other=0) * s0
                + tl.load(i1_ptr + j1, mask=live, other=0) * s1
                + tl.load(i2_ptr + j2, mask=live, other=0) * s2
                + tl.load(i3_ptr + j3, mask=live, other=0) * s3
                + first
            )
            block = (start >> BLOCK_SHIFT) + (offs - run * per_run)
            # where the block's first value falls in its run (< 0: before the run's start)
            local = (block << BLOCK_SHIFT) - start
            local = tl.where(live, local, -8)  # a slot past the end writes nothing
            if not WIDE:
                local = local.to(tl.int32)
            base = run * length
            if BLOCK_SHIFT == 2:
                lane = _lanes4(local, local + 1, local + 2, local + 3)
                where = _lanes4(base, base, base, base) + lane
            else:
                lane = _lanes2(local, local + 1)
                where = _lanes2(base, base) + lane
            mask = (lane >= 0) & (lane < length)
        else:
            mask = live
            j3 = offs % n3
            rest = offs // n3
            j2 = rest % n2
            rest = rest // n2
            j1 = rest % n1
            j0 = rest // n1
            e = (
                tl.load(i0_ptr + j0, mask=mask, other=0) * s0
                + tl.load(i1_ptr + j1, mask=mask, other=0) * s1
                + tl.load(i2_ptr + j2, mask=mask, other=0) * s2
                + tl.load(i3_ptr + j3, mask=mask, other=0) * s3
            )
            block = e >> BLOCK_SHIFT
            where = offs
        zero = tl.zeros([BLOCK], dtype=tl.uint32)
        x0, x1, x2, x3 = _philox_rounds(
            (block & 0xFFFFFFFF).to(tl.uint32),
            (block >> 32).to(tl.uint32),
            zero + c2.to(tl.uint32),
            zero + c3.to(tl.uint32),
            zero + k0.to(tl.uint32),
            zero + k1.to(tl.uint32),
        )
        # (Triton compares constexprs with ==, not with in)
        if KIND == 0 or KIND == 4 or KIND == 5 or KIND == 6 or KIND == 8:  # noqa: PLR1714
            w = _lanes4(x0, x1, x2, x3) if RUNS else _word(e, x0, x1, x2, x3)
            if KIND == 0:  # uniform, float32 / float16 / bfloat16: in float32
                v = _uniform32(
                    w, _f32(a_bits), _f32(b_bits), _f32(lo_bits), _f32(hi_bits), SHIFT, UNIT
                )
                value = _narrow(v, out_dtype)
            elif KIND == 4:  # Bernoulli, one threshold
                value = w.to(tl.int64) < threshold
            elif KIND == 5:  # Bernoulli, a threshold per element
                # by runs, the thresholds are contiguous in the shard's shape
                at = where if RUNS else j0 * ps0 + j1 * ps1 + j2 * ps2 + j3 * ps3
                limit = tl.load(p_ptr + at, mask=mask, other=0)
                value = w.to(tl.int64) < limit
            elif KIND == 8:  # dropout of the input: Bernoulli, then x * scale or x * 0
                keep = w.to(tl.int64) < threshold
                tl.store(m_ptr + where, keep, mask=mask)
                x = tl.load(x_ptr + where, mask=mask, other=0)
                if out_dtype == tl.float64:
                    value = tl.where(keep, x * _f64(a_bits), x * 0.0)
                else:  # in float32: the scale is the dtype's, the products exact before rounding
                    x = x.to(tl.float32)
                    value = _narrow(tl.where(keep, x * _f32(a_bits), x * 0.0), out_dtype)
            else:  # truncated normal, float32 / float16 / bfloat16
                v = _trunc_value32(
                    w, _f32(d_bits), _f32(p0_bits), _f32(upper_bits), shift, mirror,
                    _f32(a_bits), _f32(b_bits), _f32(lo_bits), _f32(hi_bits),
                )  # fmt: skip
                value = _narrow(v, out_dtype)
        elif KIND == 1 or KIND == 7:  # noqa: PLR1714 - float64, two words a value
            if RUNS:
                a = _lanes2(x0, x2)
                b = _lanes2(x1, x3)
            else:
                second = (e & 1) == 1
                a = tl.where(second, x2, x0)
                b = tl.where(second, x3, x1)
            if KIND == 1:  # uniform, float64
                value = _uniform64(a, b, _f64(a_bits), _f64(b_bits), _f64(hi_bits), UNIT)
            else:  # truncated normal, float64
                value = _trunc_value64(
                    a, b, _f64(d_bits), _f64(p0_bits), mirror,
                    _f64(a_bits), _f64(b_bits), _f64(lo_bits), _f64(hi_bits),
                )  # fmt: skip
        elif KIND == 2:  # normal, float32 / float16 / bfloat16 (Box-Muller within a block)
            if RUNS:  # both pairs of the block, each radius and angle once
                r0 = _radius32(x0)
                sin0, cos0 = _sincos24((x1 >> 8).to(tl.int32))
                r1 = _radius32(x2)
                sin1, cos1 = _sincos24((x3 >> 8).to(tl.int32))
                z = _lanes4(r0 * cos0, r0 * sin0, r1 * cos1, r1 * sin1)
            else:
                second = ((e >> 1) & 1) == 1
                radius = _radius32(tl.where(second, x2, x0))
                sin, cos = _sincos24((tl.where(second, x3, x1) >> 8).to(tl.int32))
                z = radius * tl.where((e & 1) == 1, sin, cos)
            z = z * _f32(a_bits)
            z = z + _f32(b_bits)
            value = _narrow(z, out_dtype)
        else:  # normal, float64
            radius = _radius64(x0, x1)
            sin, cos = _sincos53(_bits53(x2, x3))
            if RUNS:
                z = _lanes2(cos * radius, sin * radius)
            else:
                z = tl.where((e & 1) == 1, sin, cos) * radius
            z = z * _f64(a_bits)
            value = z + _f64(b_bits)
        tl.store(out_ptr + where, value, mask=mask)


def _bits(value: float) -> int:
    """The IEEE float64 bit pattern of ``value`` as a signed 64-bit integer."""
    signed: int = struct.unpack("<q", struct.pack("<d", value))[0]
    return signed


def _bits32(value: float) -> int:
    """The IEEE float32 bit pattern of ``value`` (a float32 value) as a signed 32-bit integer."""
    signed: int = struct.unpack("<i", struct.pack("<f", value))[0]
    return signed


@dataclass(frozen=True)
class _Plan:
    """How one launch covers a shard: its index vectors (``MAX_DIMS``), strides and counts."""

    vectors: list[torch.Tensor]
    strides: list[int]
    local: tuple[int, ...]  # the shard's shape
    runs: bool  # a program computes Philox blocks (else elements)
    total: int  # slots (blocks of runs) or elements
    first: int = 0
    length: int = 0
    per_run: int = 0
    one_run: bool = False


def _padded(
    vectors: list[torch.Tensor], strides: list[int], shape: Sequence[int], device: torch.device
) -> tuple[list[torch.Tensor], list[int]]:
    """At most ``MAX_DIMS`` vectors: the leading ones merged, then padded in front."""
    vectors = [v.to(device).contiguous() for v in vectors]
    if len(vectors) > MAX_DIMS:
        lead = len(vectors) - (MAX_DIMS - 1)
        merged = flat_index_of_checked(vectors[:lead], shape[:lead]).reshape(-1)
        vectors = [merged, *vectors[lead:]]
        strides = [strides[lead - 1], *strides[lead:]]
    while len(vectors) < MAX_DIMS:
        vectors.insert(0, torch.zeros(1, dtype=torch.int64, device=device))
        strides.insert(0, 0)
    return vectors, strides


def _plan(shard: ShardIndices, device: torch.device, block_shift: int) -> _Plan:
    """The launch of a checked shard: by runs where they are long enough to share blocks."""
    shape, dims = shard.shape, shard.dims
    local = tuple(v.numel() for v in dims)
    strides = [math.prod(shape[k + 1 :]) for k in range(len(shape))]
    outer, first, length = shard.run_layout()
    if length < _RUNS_FROM or math.prod(local) == 0:
        vectors, strides = _padded(list(dims), strides, shape, device)
        return _Plan(vectors, strides, local, runs=False, total=math.prod(local))
    per_block = 1 << block_shift
    vectors, outer_strides = _padded(list(dims[:outer]), strides[:outer], shape, device)
    count = math.prod(v.numel() for v in dims[:outer])
    # every run starts at the same offset in its block when the strides are multiples of the
    # block: then no run needs a block more than its length asks
    aligned = all(s % per_block == 0 for s in strides[:outer])
    lead = first % per_block if aligned else per_block - 1
    per_run = -(-(lead + length) // per_block)
    return _Plan(
        vectors, outer_strides, local, runs=True, total=count * per_run,
        first=first, length=length, per_run=per_run, one_run=count == 1,
    )  # fmt: skip


def _float_bits(value: float, dtype: torch.dtype) -> int:
    """A parameter's bits as the kernel reads it: float64 for float64 results, else float32."""
    return _bits(value) if dtype == torch.float64 else _bits32(_math32.f32(value))


def _launch(
    kind: int,
    seed: int,
    position: int,
    shard: ShardIndices,
    *,
    dtype: torch.dtype,
    device: torch.device,
    shift: int = 0,
    unit: bool = False,
    a: float = 0.0,
    b: float = 0.0,
    lo: float = 0.0,
    hi: float = 0.0,
    tail: _math.TailScale | None = None,
    width: float = 0.0,
    base: float = 0.0,
    mirror: bool = False,
    threshold: int = 0,
    limits: torch.Tensor | None = None,
    block: int | None = None,
    source: torch.Tensor | None = None,
    kept: torch.Tensor | None = None,
) -> torch.Tensor:
    """One launch: the values of ``shard`` (dropout: of ``source``, its mask into ``kept``)."""
    block_shift = 1 if kind in (_UNIFORM64, _NORMAL64, _TRUNC64) else 2
    plan = _plan(shard, device, block_shift)
    out = torch.empty(plan.local, dtype=dtype, device=device)
    if out.numel() == 0:
        return out
    sizes = [v.numel() for v in plan.vectors]
    p_strides = [0] * MAX_DIMS
    p_arg: Any = out
    if limits is not None:  # broadcast to the shard
        p = limits.expand(plan.local)
        if plan.runs:  # read where the value is written
            p = p.contiguous()
        else:  # viewed in the kernel's four dims
            p = p.contiguous().reshape(sizes) if p.dim() > MAX_DIMS else p.reshape(sizes)
            p_strides = list(p.stride())
        p_arg = p
    if tail is not None:  # the float32 truncated normal's probabilities
        d, p0, upper, scale = tail.width, tail.base, tail.upper, tail.shift
    else:
        d, p0, upper, scale = width, base, 0.0, 0
    size = block if block is not None else (_RUN_BLOCK if plan.runs else _BLOCK)
    grid = (triton.cdiv(plan.total, size),)
    reach = plan.total + size if not plan.runs else max(plan.total, out.numel()) + (size << 2)
    _kernel[grid](
        out,
        p_arg,
        out if source is None else source,
        out if kept is None else kept,
        *plan.vectors,
        sizes[1],
        sizes[2],
        sizes[3],
        *plan.strides,
        *p_strides,
        plan.total,
        plan.first,
        plan.length,
        plan.per_run,
        seed & 0xFFFFFFFF,
        seed >> 32,
        position & 0xFFFFFFFF,
        (position >> 32) | DOMAIN_FLAG,
        _float_bits(a, dtype),
        _float_bits(b, dtype),
        _float_bits(lo, dtype),
        _float_bits(hi, dtype),
        _float_bits(d, dtype),
        _float_bits(p0, dtype),
        _float_bits(upper, dtype),
        scale,
        int(mirror),
        threshold,
        KIND=kind,
        BLOCK_SHIFT=block_shift,
        SHIFT=shift,
        UNIT=unit,
        WIDE=reach >= _WIDE_FROM,
        RUNS=plan.runs,
        ONE_RUN=plan.one_run,
        LEAD=plan.first % (1 << block_shift) if plan.one_run else 0,
        BLOCK=size,
        enable_fp_fusion=False,
    )
    return out


def _shard(
    device: torch.device,
    dim_indices: Sequence[torch.Tensor],
    global_shape: Sequence[int],
    ranges: Ranges | None,
) -> ShardIndices:
    """The shard's description, once checked (on the host alone where ``ranges`` are given)."""
    shard = ShardIndices(tuple(dim_indices), tuple(int(n) for n in global_shape), ranges)
    shard.check()
    return shard


def _device(dim_indices: Sequence[torch.Tensor]) -> torch.device:
    """The index vectors' device, once checked to be one the kernel serves."""
    device = next(
        (v.device for v in dim_indices if isinstance(v, torch.Tensor)), torch.device("cpu")
    )
    reason = why_unavailable(device)
    if reason is not None:
        raise InvalidDeviceError(f"the fused Philox kernel cannot serve {device}: {reason}")
    return device


def uniform(
    seed: int,
    position: int,
    dim_indices: Sequence[torch.Tensor],
    global_shape: Sequence[int],
    dtype: torch.dtype,
    *,
    low: float = 0.0,
    high: float = 1.0,
    ranges: Ranges | None = None,
) -> torch.Tensor:
    """The generic path's ``uniform`` for the shard ``flat_index(dim_indices, global_shape)``.

    Parameters
    ----------
    seed, position : int
        As for the generic ``uniform``.
    dim_indices : sequence of torch.Tensor
        The shard's global positions along each dim (see ``flat_index``).
    global_shape : sequence of int
        The global tensor's shape.
    dtype : torch.dtype
        float32, float64, float16 or bfloat16.
    low, high : float
        The bounds, as for the generic ``uniform``.

    ranges : tuple, optional
        The runs of each dim's positions on the host (``ShardIndices.ranges``):
        with them the shard is checked and laid out without reading the
        vectors back from the GPU.

    Returns
    -------
    torch.Tensor
        The shard's values, shaped ``(len(dim_indices[0]), ...)`` on the index
        vectors' device, bit-identical to the generic path's.

    Raises
    ------
    InvalidDeviceError
        Where the kernel cannot serve the index vectors' device (see
        :func:`why_unavailable`).
    """
    device = _device(dim_indices)
    seed, position = checked_seed_position(seed, position)
    low, high, lo, hi = uniform_parameters(dtype, low, high)
    shard = _shard(device, dim_indices, global_shape, ranges)
    if low == high:
        return torch.full(index_shape(shard), low, dtype=dtype, device=device)
    width = high - low  # rounded to float32 for a float32-word dtype, as the generic path does
    unit = low == 0.0 and high == 1.0
    if dtype == torch.float64:
        kind, shift = _UNIFORM64, 0
    else:
        kind, shift = _UNIFORM32, 32 - PRECISION[dtype]
    return _launch(
        kind, seed, position, shard, dtype=dtype, device=device,
        shift=shift, unit=unit, a=width, b=low, lo=lo, hi=hi,
    )  # fmt: skip


def normal(
    seed: int,
    position: int,
    dim_indices: Sequence[torch.Tensor],
    global_shape: Sequence[int],
    dtype: torch.dtype,
    *,
    mean: float = 0.0,
    std: float = 1.0,
    ranges: Ranges | None = None,
) -> torch.Tensor:
    """The generic path's ``normal`` for the shard ``flat_index(dim_indices, global_shape)``.

    Parameters
    ----------
    seed, position : int
        As for the generic ``normal``.
    dim_indices : sequence of torch.Tensor
        The shard's global positions along each dim (see ``flat_index``).
    global_shape : sequence of int
        The global tensor's shape.
    dtype : torch.dtype
        float32, float64, float16 or bfloat16.
    mean, std : float
        As for the generic ``normal``.

    ranges : tuple, optional
        The runs of each dim's positions on the host (``ShardIndices.ranges``):
        with them the shard is checked and laid out without reading the
        vectors back from the GPU.

    Returns
    -------
    torch.Tensor
        The shard's values, bit-identical to the generic path's.

    Raises
    ------
    InvalidDeviceError
        Where the kernel cannot serve the index vectors' device (see
        :func:`why_unavailable`).
    """
    device = _device(dim_indices)
    seed, position = checked_seed_position(seed, position)
    mean, std = normal_parameters(dtype, mean, std)
    kind = _NORMAL64 if dtype == torch.float64 else _NORMAL32
    shard = _shard(device, dim_indices, global_shape, ranges)
    return _launch(
        kind, seed, position, shard, dtype=dtype, device=device, a=std, b=mean,
    )  # fmt: skip


def bernoulli_mask(
    seed: int,
    position: int,
    dim_indices: Sequence[torch.Tensor],
    global_shape: Sequence[int],
    p: float | torch.Tensor,
    *,
    ranges: Ranges | None = None,
) -> torch.Tensor:
    """The generic path's ``bernoulli_mask`` for the shard of ``dim_indices`` in ``global_shape``.

    Parameters
    ----------
    seed, position : int
        As for the generic ``bernoulli_mask``.
    dim_indices : sequence of torch.Tensor
        The shard's global positions along each dim (see ``flat_index``).
    global_shape : sequence of int
        The global tensor's shape.
    p : float or torch.Tensor
        The probability of true: one number, or a floating tensor that
        broadcasts to the shard's shape.

    ranges : tuple, optional
        The runs of each dim's positions on the host (``ShardIndices.ranges``):
        with them the shard is checked and laid out without reading the
        vectors back from the GPU.

    Returns
    -------
    torch.Tensor
        The shard's mask (bool), bit-identical to the generic path's.

    Raises
    ------
    InvalidDeviceError
        Where the kernel cannot serve the index vectors' device (see
        :func:`why_unavailable`).
    """
    device = _device(dim_indices)
    seed, position = checked_seed_position(seed, position)
    single = probability(p)
    shard = _shard(device, dim_indices, global_shape, ranges)
    if isinstance(p, torch.Tensor):
        if not probabilities_broadcast(p.shape, index_shape(shard)):
            raise InvalidValueError(
                f"probabilities of shape {tuple(p.shape)} do not broadcast to the shard's "
                f"shape {index_shape(shard)}"
            )
        wide = torch.float64 if p.dtype == torch.float64 else torch.float32
        limits = torch.round(p.to(device=device, dtype=wide) * 2.0**32).to(torch.int64)
        return _launch(
            _BERNOULLI_P, seed, position, shard, dtype=torch.bool, device=device, limits=limits,
        )  # fmt: skip
    return _launch(
        _BERNOULLI, seed, position, shard, dtype=torch.bool, device=device,
        threshold=round(single * 2**32),
    )  # fmt: skip


def dropout(
    seed: int,
    position: int,
    dim_indices: Sequence[torch.Tensor],
    global_shape: Sequence[int],
    source: torch.Tensor,
    p: float,
    *,
    ranges: Ranges | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The generic path's ``dropout`` of ``source``, the shard of ``dim_indices``, in one launch.

    Parameters
    ----------
    seed, position : int
        As for the generic ``dropout``.
    dim_indices : sequence of torch.Tensor
        The shard's global positions along each dim (see ``flat_index``).
    global_shape : sequence of int
        The global tensor's shape.
    source : torch.Tensor
        The shard's input: float32, float64, float16 or bfloat16, of the shard's shape.
    p : float
        The probability of dropping an element, ``0 < p < 1``.
    ranges : tuple, optional
        The runs of each dim's positions on the host (``ShardIndices.ranges``).

    Returns
    -------
    tuple of torch.Tensor
        The output and the mask of kept elements, bit-identical to the generic path's.

    Raises
    ------
    InvalidDeviceError
        Where the kernel cannot serve the index vectors' device (see
        :func:`why_unavailable`).
    """
    device = _device(dim_indices)
    seed, position = checked_seed_position(seed, position)
    scale, threshold = dropout_parameters(source.dtype, p)
    shard = _shard(device, dim_indices, global_shape, ranges)
    if tuple(source.shape) != index_shape(shard):
        raise InvalidValueError(
            f"the input has shape {tuple(source.shape)}, the shard {index_shape(shard)}"
        )
    source = source.to(device).contiguous()
    kept = torch.empty(source.shape, dtype=torch.bool, device=device)
    out = _launch(
        _DROPOUT, seed, position, shard, dtype=source.dtype, device=device,
        a=scale, threshold=threshold, source=source, kept=kept,
    )  # fmt: skip
    return out, kept


def trunc_normal(
    seed: int,
    position: int,
    dim_indices: Sequence[torch.Tensor],
    global_shape: Sequence[int],
    dtype: torch.dtype,
    *,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    ranges: Ranges | None = None,
) -> torch.Tensor:
    """The generic path's ``trunc_normal`` for the shard ``flat_index(dim_indices, global_shape)``.

    Parameters
    ----------
    seed, position : int
        As for the generic ``trunc_normal``.
    dim_indices : sequence of torch.Tensor
        The shard's global positions along each dim (see ``flat_index``).
    global_shape : sequence of int
        The global tensor's shape.
    dtype : torch.dtype
        float32, float64, float16 or bfloat16.
    mean, std, a, b : float
        As for the generic ``trunc_normal``.

    ranges : tuple, optional
        The runs of each dim's positions on the host (``ShardIndices.ranges``):
        with them the shard is checked and laid out without reading the
        vectors back from the GPU.

    Returns
    -------
    torch.Tensor
        The shard's values, bit-identical to the generic path's.

    Raises
    ------
    InvalidDeviceError
        Where the kernel cannot serve the index vectors' device (see
        :func:`why_unavailable`).
    """
    device = _device(dim_indices)
    seed, position = checked_seed_position(seed, position)
    mean, std, a, b, lo, hi = trunc_normal_parameters(dtype, mean, std, a, b)
    shard = _shard(device, dim_indices, global_shape, ranges)
    if a == b:
        return torch.full(index_shape(shard), a, dtype=dtype, device=device)
    alpha, beta, mirror = _math.standard_bounds(mean, std, a, b)
    if dtype == torch.float64:
        base, width = _math.phi_interval(alpha, beta)
        return _launch(
            _TRUNC64, seed, position, shard, dtype=dtype, device=device, a=std, b=mean,
            lo=lo, hi=hi, width=width, base=base, mirror=mirror,
        )  # fmt: skip
    return _launch(
        _TRUNC32, seed, position, shard, dtype=dtype, device=device, a=std, b=mean,
        lo=lo, hi=hi, tail=_math.tail_scale(alpha, beta), mirror=mirror,
    )  # fmt: skip
