# mypy: disallow-untyped-decorators=False, disallow-untyped-defs=False, disallow-untyped-calls=False
# (Triton kernels take untyped, specialised parameters; the public functions are fully typed.)
# ruff: noqa: PLR0917
# (Triton device functions take their operands and constants positionally.)
"""A fused Triton kernel of the Philox ops for CUDA: a shard's uniform, normal, Bernoulli values.

One launch computes a local shard's values straight from the shard's per-dim
global index vectors and writes them to the output: no int64 index tensor of
the shard, no table of words, no temporaries. Up to four dims are read as
they are; leading dims beyond four are collapsed into one vector whose length
is the product of their local sizes (never the shard's size).

The counter layout (:mod:`hwrng._philox._bits`), the bit-to-float mapping
and every float operation are those of the generic path
(:mod:`hwrng._philox._distributions`) -- the same IEEE operations in the same
order, with FP contraction off (``enable_fp_fusion=False``) -- so the values
are bit-identical to the generic path's. The float32-to-bfloat16 rounding is
done on the bits (round to nearest even, as torch does), so it does not depend
on the backend's conversion instruction either. Float parameters travel as
their float64 bit patterns (Triton passes Python floats as float32).

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
from typing import Any

import torch

from hwrng._exceptions import InvalidDeviceError, InvalidValueError
from hwrng._philox import _math
from hwrng._philox._bits import DOMAIN_FLAG
from hwrng._philox._index import check_dim_indices, flat_index_of_checked
from hwrng._philox._parameters import (
    PRECISION,
    checked_seed_position,
    normal_parameters,
    probabilities_broadcast,
    probability,
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

__all__ = ["MAX_DIMS", "available", "bernoulli_mask", "normal", "uniform", "why_unavailable"]

#: The kernel reads up to this many per-dim index vectors (more dims are collapsed to fit).
MAX_DIMS = 4

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
_BLOCK = 4096 if _INTERPRET else 256

# what the kernel computes (a constexpr)
_UNIFORM32, _UNIFORM64, _NORMAL32, _NORMAL64, _BERNOULLI, _BERNOULLI_P = range(6)


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
    _SQRT_HALF_BITS = tl.constexpr(0x3FE6A09E667F3BCD)

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
    def _word(e, x0, x1, x2, x3):
        """Word ``e % 4`` of the block."""
        lane = e & 3
        return tl.where(lane == 0, x0, tl.where(lane == 1, x1, tl.where(lane == 2, x2, x3)))

    @triton.jit
    def _bits53(a, b):
        return ((a.to(tl.int64) >> 5) << 26) | (b.to(tl.int64) >> 6)

    @triton.jit
    def _ln(
        x,
        LN2_HI: tl.constexpr,
        LN2_LO: tl.constexpr,
        G0: tl.constexpr,
        G1: tl.constexpr,
        G2: tl.constexpr,
        G3: tl.constexpr,
        G4: tl.constexpr,
        G5: tl.constexpr,
        G6: tl.constexpr,
    ):
        """``hwrng._philox._math.ln`` (x >= 2**-1022), operation for operation."""
        bits = x.to(tl.int64, bitcast=True)
        k = (bits - _SQRT_HALF_BITS) >> 52
        z = (bits - (k << 52)).to(tl.float64, bitcast=True)
        exponent = k.to(tl.float64)
        f = z - 1.0
        s = f / (f + 2.0)
        w = s * s
        acc = w * G6
        acc = acc + G5
        acc = acc * w + G4
        acc = acc * w + G3
        acc = acc * w + G2
        acc = acc * w + G1
        acc = acc * w + G0
        tail = acc * w
        half_square = (f * f) * 0.5
        inner = (half_square + tail) * s + exponent * LN2_LO
        out = -(half_square - inner)
        out = out + f
        return out + exponent * LN2_HI

    @triton.jit
    def _sin_half_pi(
        s,
        H0: tl.constexpr,
        H1: tl.constexpr,
        H2: tl.constexpr,
        H3: tl.constexpr,
        H4: tl.constexpr,
        H5: tl.constexpr,
        H6: tl.constexpr,
        H7: tl.constexpr,
        H8: tl.constexpr,
    ):
        """``hwrng._philox._math.sin_half_pi``, operation for operation."""
        x = s * s
        acc = x * H8
        acc = acc + H7
        acc = acc * x + H6
        acc = acc * x + H5
        acc = acc * x + H4
        acc = acc * x + H3
        acc = acc * x + H2
        acc = acc * x + H1
        acc = acc * x + H0
        return acc * s

    @triton.jit
    def _turn(
        k,
        want_sin,
        BITS: tl.constexpr,
        H0: tl.constexpr,
        H1: tl.constexpr,
        H2: tl.constexpr,
        H3: tl.constexpr,
        H4: tl.constexpr,
        H5: tl.constexpr,
        H6: tl.constexpr,
        H7: tl.constexpr,
        H8: tl.constexpr,
    ):
        """The sine (where ``want_sin``) or cosine of ``2 pi k / 2**BITS``, as ``_sincos_turns``."""
        quadrant = k >> (BITS - 2)
        s = (k & ((1 << (BITS - 2)) - 1)).to(tl.float64) * (2.0 ** (2 - BITS))
        near = _sin_half_pi(s, H0, H1, H2, H3, H4, H5, H6, H7, H8)
        far = _sin_half_pi(1.0 - s, H0, H1, H2, H3, H4, H5, H6, H7, H8)
        odd = (quadrant & 1) == 1
        sin = tl.where(odd, far, near)
        cos = tl.where(odd, near, far)
        sin = tl.where(quadrant >= 2, -sin, sin)
        cos = tl.where((quadrant == 1) | (quadrant == 2), -cos, cos)
        return tl.where(want_sin, sin, cos)

    @triton.jit
    def _to_bf16(x):
        """float32 to bfloat16 rounding to nearest even, on the bits (finite values)."""
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
        return bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)

    # (one return each: the compiler also generates the code after an early return)
    @triton.jit
    def _narrow(single, out_dtype: tl.constexpr):
        """float32 to a 32-bit-word output dtype (float32, float16 or bfloat16)."""
        return _to_bf16(single) if out_dtype == tl.bfloat16 else single.to(out_dtype)

    @triton.jit
    def _round_out(v, out_dtype: tl.constexpr):
        """float64 to the output dtype, via float32 for the half types (``_round_to``)."""
        return v if out_dtype == tl.float64 else _narrow(v.to(tl.float32), out_dtype)

    # The kernel's branches are compile-time (KIND is a constexpr): each launch compiles one.
    @triton.jit(do_not_specialize=["k0", "k1", "c2", "c3", "a_bits", "b_bits", "lo_bits"])
    def _kernel(  # noqa: PLR0915
        out_ptr,
        p_ptr,
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
        k0,
        k1,
        c2,
        c3,
        a_bits,
        b_bits,
        lo_bits,
        hi_bits,
        threshold,
        LN2_HI: tl.constexpr,
        LN2_LO: tl.constexpr,
        G0: tl.constexpr,
        G1: tl.constexpr,
        G2: tl.constexpr,
        G3: tl.constexpr,
        G4: tl.constexpr,
        G5: tl.constexpr,
        G6: tl.constexpr,
        H0: tl.constexpr,
        H1: tl.constexpr,
        H2: tl.constexpr,
        H3: tl.constexpr,
        H4: tl.constexpr,
        H5: tl.constexpr,
        H6: tl.constexpr,
        H7: tl.constexpr,
        H8: tl.constexpr,
        KIND: tl.constexpr,
        BLOCK_SHIFT: tl.constexpr,
        SHIFT: tl.constexpr,
        UNIT: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        out_dtype: tl.constexpr = out_ptr.dtype.element_ty
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < total
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
        zero = tl.zeros([BLOCK], dtype=tl.uint32)
        x0, x1, x2, x3 = _philox_rounds(
            (block & 0xFFFFFFFF).to(tl.uint32),
            (block >> 32).to(tl.uint32),
            zero + c2.to(tl.uint32),
            zero + c3.to(tl.uint32),
            zero + k0.to(tl.uint32),
            zero + k1.to(tl.uint32),
        )
        if KIND == 0:  # uniform, float32 / float16 / bfloat16
            k = _word(e, x0, x1, x2, x3) >> SHIFT
            if UNIT:  # exact in every step, so computing in float32 changes nothing
                value = _narrow(k.to(tl.float32) * (2.0 ** (SHIFT - 32)), out_dtype)
            else:
                u = k.to(tl.float64) * (2.0 ** (SHIFT - 32))
                u = u * _f64(a_bits)
                u = u + _f64(b_bits)
                # clamp after rounding, compared in float32 (exact: the bounds and every
                # value of the output dtype are float32 values)
                wide = _round_out(u, out_dtype).to(tl.float32)
                wide = tl.maximum(wide, _f64(lo_bits).to(tl.float32))
                wide = tl.minimum(wide, _f64(hi_bits).to(tl.float32))
                value = _narrow(wide, out_dtype)
        elif KIND == 1:  # uniform, float64
            second = (e & 1) == 1
            u = _bits53(tl.where(second, x2, x0), tl.where(second, x3, x1)).to(tl.float64)
            u = u * (2.0**-53)
            if UNIT:
                value = u
            else:
                u = u * _f64(a_bits)
                u = u + _f64(b_bits)
                value = tl.minimum(u, _f64(hi_bits))
        elif KIND == 4:  # Bernoulli, one threshold
            value = _word(e, x0, x1, x2, x3).to(tl.int64) < threshold
        elif KIND == 5:  # Bernoulli, a threshold per element
            where = j0 * ps0 + j1 * ps1 + j2 * ps2 + j3 * ps3
            limit = tl.load(p_ptr + where, mask=mask, other=0)
            value = _word(e, x0, x1, x2, x3).to(tl.int64) < limit
        else:  # normal (Box-Muller within a block)
            if KIND == 2:
                second = ((e >> 1) & 1) == 1
                a = tl.where(second, x2, x0)
                b = tl.where(second, x3, x1)
                u1 = (a.to(tl.int64) + 1).to(tl.float64) * (2.0**-32)
                angle = _turn(b.to(tl.int64), (e & 1) == 1, 32, H0, H1, H2, H3, H4, H5, H6, H7, H8)
            else:
                u1 = (_bits53(x0, x1) + 1).to(tl.float64) * (2.0**-53)
                angle = _turn(_bits53(x2, x3), (e & 1) == 1, 53, H0, H1, H2, H3, H4, H5, H6, H7, H8)
            log = _ln(u1, LN2_HI, LN2_LO, G0, G1, G2, G3, G4, G5, G6)
            radius = tl.sqrt(log * -2.0)
            z = angle * radius
            z = z * _f64(a_bits)
            z = z + _f64(b_bits)
            value = _round_out(z, out_dtype)
        tl.store(out_ptr + offs, value, mask=mask)


def _bits(value: float) -> int:
    """The IEEE float64 bit pattern of ``value`` as a signed 64-bit integer."""
    signed: int = struct.unpack("<q", struct.pack("<d", value))[0]
    return signed


def _shard(
    dim_indices: Sequence[torch.Tensor], global_shape: Sequence[int], device: torch.device
) -> tuple[list[torch.Tensor], list[int], tuple[int, ...]]:
    """``MAX_DIMS`` index vectors with their global strides, and the shard's shape."""
    shape, vectors = check_dim_indices(dim_indices, global_shape)
    local = tuple(v.numel() for v in vectors)
    strides = [math.prod(shape[k + 1 :]) for k in range(len(shape))]
    vectors = [v.to(device).contiguous() for v in vectors]
    if len(vectors) > MAX_DIMS:
        lead = len(vectors) - (MAX_DIMS - 1)
        merged = flat_index_of_checked(vectors[:lead], shape[:lead]).reshape(-1)
        vectors = [merged, *vectors[lead:]]
        strides = [strides[lead - 1], *strides[lead:]]
    while len(vectors) < MAX_DIMS:
        vectors.insert(0, torch.zeros(1, dtype=torch.int64, device=device))
        strides.insert(0, 0)
    return vectors, strides, local


def _launch(
    kind: int,
    seed: int,
    position: int,
    shard: tuple[list[torch.Tensor], list[int], tuple[int, ...]],
    *,
    dtype: torch.dtype,
    device: torch.device,
    shift: int = 0,
    unit: bool = False,
    a: float = 0.0,
    b: float = 0.0,
    lo: float = 0.0,
    hi: float = 0.0,
    threshold: int = 0,
    limits: torch.Tensor | None = None,
) -> torch.Tensor:
    vectors, strides, local = shard
    out = torch.empty(local, dtype=dtype, device=device)
    total = out.numel()
    if total == 0:
        return out
    sizes = [v.numel() for v in vectors]
    p_strides = [0] * MAX_DIMS
    p_arg: Any = out
    if limits is not None:  # broadcast to the shard, then viewed in the kernel's four dims
        p = limits.expand(local)
        p = p.contiguous().reshape(sizes) if p.dim() > MAX_DIMS else p.reshape(sizes)
        p_strides = list(p.stride())
        p_arg = p
    constants = (_math.LN2_HI, _math.LN2_LO, *_math.LN_G, *_math.SIN_H)
    grid = (triton.cdiv(total, _BLOCK),)
    _kernel[grid](
        out,
        p_arg,
        *vectors,
        sizes[1],
        sizes[2],
        sizes[3],
        *strides,
        *p_strides,
        total,
        seed & 0xFFFFFFFF,
        seed >> 32,
        position & 0xFFFFFFFF,
        (position >> 32) | DOMAIN_FLAG,
        _bits(a),
        _bits(b),
        _bits(lo),
        _bits(hi),
        threshold,
        *constants,
        KIND=kind,
        BLOCK_SHIFT=1 if kind in (_UNIFORM64, _NORMAL64) else 2,
        SHIFT=shift,
        UNIT=unit,
        BLOCK=_BLOCK,
        enable_fp_fusion=False,
    )
    return out


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
    shard = _shard(dim_indices, global_shape, device)
    if low == high:
        return torch.full(shard[2], low, dtype=dtype, device=device)
    width = high - low
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
    shard = _shard(dim_indices, global_shape, device)
    return _launch(
        kind, seed, position, shard, dtype=dtype, device=device, a=std, b=mean,
    )  # fmt: skip


def bernoulli_mask(
    seed: int,
    position: int,
    dim_indices: Sequence[torch.Tensor],
    global_shape: Sequence[int],
    p: float | torch.Tensor,
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
    shard = _shard(dim_indices, global_shape, device)
    if isinstance(p, torch.Tensor):
        if not probabilities_broadcast(p.shape, shard[2]):
            raise InvalidValueError(
                f"probabilities of shape {tuple(p.shape)} do not broadcast to the shard's "
                f"shape {shard[2]}"
            )
        limits = torch.round(p.to(device=device, dtype=torch.float64) * 2.0**32)
        return _launch(
            _BERNOULLI_P, seed, position, shard, dtype=torch.bool, device=device,
            limits=limits.to(torch.int64),
        )  # fmt: skip
    return _launch(
        _BERNOULLI, seed, position, shard, dtype=torch.bool, device=device,
        threshold=round(single * 2**32),
    )  # fmt: skip
