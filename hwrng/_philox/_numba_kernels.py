# mypy: ignore-errors
# (numba's decorators and intrinsics are untyped; the typed face is hwrng._philox._compiled.)
# ruff: noqa: PLR0917
# (kernels take their operands positionally, as numba compiles them.)
"""The Philox ops' CPU kernels, compiled by numba: the contract, operation for operation.

Imported only by :mod:`hwrng._philox._compiled`, and only once numba is known
to import (importing this module compiles nothing: numba compiles a kernel on
its first call, or loads it from its on-disk cache).

Each kernel computes the values of a shard given as runs of consecutive
global element indices: run ``r`` starts at ``starts[r]``, every run is
``length`` long, and its values go to ``out[r * length : (r + 1) * length]``.
A Philox block is computed once for all the values it yields inside a run (a
run's first and last blocks may be partly outside it; the block before is
kept, so short runs that share a block compute it once).

What decides the bits, as the contract (``docs/invariant.md``) writes it and
the generic path (:mod:`hwrng._philox._distributions`) computes it:

* every float operation is one IEEE operation rounded to nearest: numba's
  ``fastmath=False`` gives LLVM no licence to reassociate or to contract a
  multiply and an add into a fused multiply-add (``tests/test_philox_compiled.py``
  reads the machine code of every kernel for ``vfmadd`` and its kin), and the
  float32 kernels type every constant as float32, so no operation is widened
  to float64 (tested on the LLVM IR: no ``double`` in a float32 kernel);
* the elementary functions are the contract's own (:mod:`_math32`,
  :mod:`_math`), ported operation for operation, in the generic path's order;
  no library function is called;
* float16 and bfloat16 results are computed in float32 here and rounded by
  torch's own conversion, as the generic path rounds them
  (:mod:`hwrng._philox._compiled`);
* ``error_model="numpy"``: a division is the IEEE division (no Python
  ``ZeroDivisionError`` check, which would also stop LLVM vectorising).

Integer arithmetic is on uint64 words holding 32-bit values (Philox's
32x32-bit products are exact in 64 bits) and on int64 for the float bit
tricks: numba widens int32 arithmetic to int64, which gives the int32
results wherever the generic path's int32 operations do not overflow (none
does, on the values they see).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from hwrng._philox import _math, _math32

__all__ = [
    "KERNELS",
    "apply_mask",
    "bernoulli",
    "cache_error",
    "normal32",
    "normal64",
    "trunc32",
    "trunc64",
    "uniform32",
    "uniform64",
    "words",
]

_OPTIONS = {"nogil": True, "fastmath": False, "error_model": "numpy", "boundscheck": False}
# Helpers are inlined into each kernel by numba itself: numba compiles every function into a
# library of its own, and LLVM does not inline across them (a call a block would not vectorise).
_INLINE = {**_OPTIONS, "inline": "always"}

_U = np.uint64
_MASK = _U(0xFFFFFFFF)
_S32 = _U(32)
_M0, _M1 = _U(0xD2511F53), _U(0xCD9E8D57)
_W0, _W1 = _U(0x9E3779B9), _U(0xBB67AE85)

_F = np.float32
_ZERO32, _HALF32, _ONE32, _TWO32, _MINUS_TWO32 = _F(0.0), _F(0.5), _F(1.0), _F(2.0), _F(-2.0)
_ONE_AND_HALF32 = _F(1.5)
_UNIT32 = _F(2.0**-32)
_UNIT33 = _F(2.0**-33)
_TURN32 = _F(2.0**-22)
_HALF_TURN32 = _F(2.0**21)
_LN2_HI32, _LN2_LO32 = _F(_math32.LN2_HI), _F(_math32.LN2_LO)
_G32 = tuple(_F(c) for c in _math32.LN_G)
_S32_POLY = tuple(_F(c) for c in _math32.SIN_S)
_C32_POLY = tuple(_F(c) for c in _math32.COS_C)
_CA32 = tuple(_F(c) for c in _math32.NDTRI_CENTRAL_A)
_CB32 = tuple(_F(c) for c in _math32.NDTRI_CENTRAL_B)
_NA32 = tuple(_F(c) for c in _math32.NDTRI_NEAR_A)
_NB32 = tuple(_F(c) for c in _math32.NDTRI_NEAR_B)
_FA32 = tuple(_F(c) for c in _math32.NDTRI_FAR_A)
_FB32 = tuple(_F(c) for c in _math32.NDTRI_FAR_B)
_R0 = _F(_math32.R0)
_NEAR32, _FAR32 = _F(_math32.NEAR_OFFSET), _F(_math32.FAR_OFFSET)
_SQRT_SEED32 = np.int64(_math32.SQRT_SEED)
_SQRT_HALF_BITS32 = np.int64(_math32.SQRT_HALF_BITS)
_CENTRAL_LIMIT_BITS = np.int64(_math32.CENTRAL_LIMIT_BITS)
_FAR_BITS = np.int64(0x40A00000)  # float32 bits of 5.0

_D = np.float64
_UNIT53 = _D(2.0**-53)
_UNIT51 = _D(2.0**-51)
_LN2_HI64, _LN2_LO64 = _D(_math.LN2_HI), _D(_math.LN2_LO)
_LG = tuple(_D(c) for c in _math.LN_G)
_SH = tuple(_D(c) for c in _math.SIN_H)
_A, _B = tuple(_D(c) for c in _math.NDTRI_A), tuple(_D(c) for c in _math.NDTRI_B)
_C, _DD = tuple(_D(c) for c in _math.NDTRI_C), tuple(_D(c) for c in _math.NDTRI_D)
_E, _FF = tuple(_D(c) for c in _math.NDTRI_E), tuple(_D(c) for c in _math.NDTRI_F)
_SQRT_SEED64 = np.int64(_math.SQRT_SEED)
_SQRT_HALF_BITS64 = np.int64(0x3FE6A09E667F3BCD)
_TINY64 = _D(2.0**-1022)
_SCALE54 = _D(2.0**54)
_SMALLEST64 = _D(5e-324)


# -- bit views -------------------------------------------------------------------------------


@intrinsic
def _bits32(typingctx, x):
    """The float32 ``x``'s bits as an int32."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def _float32(typingctx, bits):
    """The float32 whose bits are the int32 ``bits``."""
    if bits != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@intrinsic
def _bits64(typingctx, x):
    """The float64 ``x``'s bits as an int64."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def _float64(typingctx, bits):
    """The float64 whose bits are the int64 ``bits``."""
    if bits != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


# -- Philox4x32-10 ---------------------------------------------------------------------------


@njit(**_INLINE)
def _philox(block, k0, k1, c2, c3):
    """The four words of ``block`` (int64) under the key and the counter's constant words."""
    b = _U(block)
    x0, x1, x2, x3 = b & _MASK, b >> _S32, c2, c3
    for _ in range(10):
        p0 = x0 * _M0
        p1 = x2 * _M1
        x0, x1, x2, x3 = (p1 >> _S32) ^ x1 ^ k0, p1 & _MASK, (p0 >> _S32) ^ x3 ^ k1, p0 & _MASK
        k0 = (k0 + _W0) & _MASK
        k1 = (k1 + _W1) & _MASK
    return x0, x1, x2, x3


# -- the runs --------------------------------------------------------------------------------
# A kernel's values come in groups: ``group(params, j, w0, w1, w2, w3)`` gives the values of
# group ``j`` of a block, from the block's words -- one value (``_fill_each``: an element and
# its word, or float64's element and its two words) or two (``_fill_pairs``: Box-Muller's pair
# of values from two words, or float64's from four). ``per_block`` values a block (4, or 2 for
# float64). Each driver calls ``group`` at two places only (numba inlines every helper, and
# its compile time grows with the inlined code).


@njit(**_INLINE)
def _word(j, w0, w1, w2, w3):
    """Word ``j`` of the block."""
    if j == 0:
        return w0
    if j == 1:
        return w1
    if j == 2:
        return w2
    return w3


@njit(**_INLINE)
def _fill_each(out, starts, length, k0, k1, c2, c3, per_block, group, params):
    """``out`` from ``group``, one value a group (``per_block`` groups a block)."""
    shift = 2 if per_block == 4 else 1
    cached = np.int64(-1)
    x0, x1, x2, x3 = _U(0), _U(0), _U(0), _U(0)
    for r in range(starts.size):
        e = starts[r]
        end = e + length
        place = r * length - e  # out[e + place] is element e's place
        while e < end:
            if (e & (per_block - 1)) == 0 and end - e >= per_block:  # whole blocks
                first = e >> shift
                count = (end - e) >> shift
                # (a slice indexed from 0: no negative-index check in the loop, which vectorises)
                whole = out[e + place : e + place + per_block * count]
                for i in range(count):
                    w0, w1, w2, w3 = _philox(first + i, k0, k1, c2, c3)
                    for j in range(per_block):
                        whole[per_block * i + j] = group(params, j, w0, w1, w2, w3)
                e += per_block * count
            else:  # a block partly inside the run: its values one at a time
                block = e >> shift
                if block != cached:
                    x0, x1, x2, x3 = _philox(block, k0, k1, c2, c3)
                    cached = block
                out[e + place] = group(params, e & (per_block - 1), x0, x1, x2, x3)
                e += 1


@njit(**_INLINE)
def _fill_pairs(out, starts, length, k0, k1, c2, c3, per_block, group, params):
    """``out`` from ``group``, two values a group (``per_block // 2`` groups a block)."""
    shift = 2 if per_block == 4 else 1
    cached = np.int64(-1)
    x0, x1, x2, x3 = _U(0), _U(0), _U(0), _U(0)
    for r in range(starts.size):
        e = starts[r]
        end = e + length
        place = r * length - e
        while e < end:
            if (e & (per_block - 1)) == 0 and end - e >= per_block:
                first = e >> shift
                count = (end - e) >> shift
                whole = out[e + place : e + place + per_block * count]
                for i in range(count):
                    w0, w1, w2, w3 = _philox(first + i, k0, k1, c2, c3)
                    for j in range(per_block // 2):
                        even, odd = group(params, j, w0, w1, w2, w3)
                        whole[per_block * i + 2 * j] = even
                        whole[per_block * i + 2 * j + 1] = odd
                e += per_block * count
            else:
                block = e >> shift
                if block != cached:
                    x0, x1, x2, x3 = _philox(block, k0, k1, c2, c3)
                    cached = block
                lane = e & (per_block - 1)
                even, odd = group(params, lane >> 1, x0, x1, x2, x3)
                out[e + place] = odd if lane & 1 else even
                e += 1


# -- float32 functions (_math32) -------------------------------------------------------------


@njit(**_INLINE)
def _at_least(x, lo):
    """``max(x, lo)``, ``x`` on a tie (as torch's clamp and the contract's reference)."""
    return lo if x < lo else x


@njit(**_INLINE)
def _at_most(x, hi):
    """``min(x, hi)``, ``x`` on a tie."""
    return hi if x > hi else x


@njit(**_INLINE)
def _horner(x, c):
    """``sum_k c[k] * x**k`` by Horner's rule, as ``_math32.horner``.

    One multiply, then one add, a step; ``c`` is a tuple of constants of ``x``'s type, low to
    high, whose length numba knows when it compiles (LLVM unrolls the loop).
    """
    acc = x * c[len(c) - 1]
    for k in range(len(c) - 2, 0, -1):
        acc = acc + c[k]
        acc = acc * x
    return acc + c[0]


@njit(**_INLINE)
def _ln32(x, exponent):
    """``_math32.ln``: ``ln(x * 2**exponent)`` for positive normal float32 ``x``."""
    bits = np.int64(_bits32(x))
    k = (bits - _SQRT_HALF_BITS32) >> 23
    z = _float32(np.int32(bits - (k << 23)))
    e = _F(k + exponent)
    f = z - _ONE32
    s = f / (f + _TWO32)
    w = s * s
    tail = _horner(w, _G32) * w
    half_square = (f * f) * _HALF32
    inner = (half_square + tail) * s + e * _LN2_LO32
    return (f - (half_square - inner)) + e * _LN2_HI32


@njit(**_INLINE)
def _sqrt32(v):
    """``_math32.sqrt``: three Newton steps from a bit-level guess; ``+0`` for ``+-0``."""
    bits = np.int64(_bits32(v))
    y = _float32(np.int32((bits >> 1) + _SQRT_SEED32))
    for _ in range(3):
        y = (v / y + y) * _HALF32
    return _ZERO32 if (bits & 0x7FFFFFFF) == 0 else y


@njit(**_INLINE)
def _sincos32(k):
    """``_math32.sincos_turns``: ``sin``, ``cos`` of ``2 pi k / 2**24``, ``k`` in ``[0, 2**24)``."""
    t = _F(k & 0x3FFFFF)
    t = -abs(t - _HALF_TURN32)
    t = (t + _HALF_TURN32) * _TURN32
    w = t * t
    sin_t = _horner(w, _S32_POLY) * t
    sin_t = sin_t + t * _ONE_AND_HALF32
    cos_t = _horner(w, _C32_POLY) * w + _ONE32
    bit21, bit22, bit23 = (k >> 21) & 1, (k >> 22) & 1, (k >> 23) & 1
    if bit21 != bit22:
        sin_t, cos_t = cos_t, sin_t
    if bit22 != bit23:
        cos_t = -cos_t
    if bit23:
        sin_t = -sin_t
    return sin_t, cos_t


@njit(**_INLINE)
def _ndtri_central32(q):
    r = -(q * q) + _R0
    return (q * _horner(r, _CA32)) / _horner(r, _CB32)


@njit(**_INLINE)
def _ndtri_tail32(t):
    near = t - _NEAR32
    far = t - _FAR32
    y_far = _horner(far, _FA32) / _horner(far, _FB32)
    y_near = _horner(near, _NA32) / _horner(near, _NB32)
    beyond = (np.int64(_bits32(t)) & 0x7FFFFFFF) > _FAR_BITS  # 5 < |t| (or NaN)
    return y_far if beyond else y_near


@njit(**_INLINE)
def _trunc_ndtri32(p, w, width, upper, shift):
    """``_distributions._ndtri32``: ``Phi^-1`` of the probability ``p`` from word ``w``.

    With ``shift`` (every ``p`` in the lower tail, scaled by ``2**shift``): ``-TAIL(SQRT(-LN(p,
    -shift)))``; else the central fit, or the tail of ``p`` (``q < 0``) or of the
    complementary uniform's ``p'`` (``q > 0``). (Each function at one place in the code: numba
    inlines them, and its compile time grows with the inlined code.)
    """
    q = p - _HALF32
    q_bits = np.int64(_bits32(q))
    lower = shift != 0 or q_bits < 0  # q's sign bit (q is never -0)
    complement = _F(np.int64((_MASK - w) * _U(2) + _U(1))) * _UNIT33
    complement = complement * width + upper
    tail = _ndtri_tail32(_sqrt32(-_ln32(p if lower else complement, -shift)))
    if lower:
        tail = -tail
    central = _ndtri_central32(q)  # (both computed, one kept: a select, which vectorises)
    return tail if shift != 0 or (q_bits & 0x7FFFFFFF) > _CENTRAL_LIMIT_BITS else central


# -- float64 functions (_math) ---------------------------------------------------------------


@njit(**_INLINE)
def _ln64(x, subnormal):
    """``_math.ln``, operation for operation."""
    small = subnormal and x < _TINY64
    if small:
        x = x * _SCALE54
    bits = _bits64(x)
    k = (bits - _SQRT_HALF_BITS64) >> 52
    z = _float64(bits - (k << 52))
    if small:
        k = k - 54
    exponent = _D(k)
    f = z - 1.0
    s = f / (f + 2.0)
    w = s * s
    tail = _horner(w, _LG) * w
    half_square = (f * f) * 0.5
    inner = (half_square + tail) * s + exponent * _LN2_LO64
    return (-(half_square - inner) + f) + exponent * _LN2_HI64


@njit(**_INLINE)
def _sqrt64(v):
    """``_math.sqrt``: four Newton steps from a bit-level guess; ``+0`` for ``+-0``."""
    bits = _bits64(v)
    y = _float64((bits >> 1) + _SQRT_SEED64)
    for _ in range(4):
        y = (v / y + y) * 0.5
    return 0.0 if (bits & 0x7FFFFFFFFFFFFFFF) == 0 else y


@njit(**_INLINE)
def _sincos64(k):
    """``_math.sincos_turns(k, 53)``."""
    quadrant = k >> 51
    s = _D(k & ((1 << 51) - 1)) * _UNIT51
    near = _horner(s * s, _SH) * s
    r = 1.0 - s
    far = _horner(r * r, _SH) * r
    if quadrant & 1:
        sin, cos = far, near
    else:
        sin, cos = near, far
    if quadrant >= 2:
        sin = -sin
    if quadrant == 1 or quadrant == 2:  # noqa: PLR1714
        cos = -cos
    return sin, cos


@njit(**_INLINE)
def _ndtri64(p):
    """``_math.ndtri``, operation for operation."""
    q = p - 0.5
    r = 0.180625 - q * q
    central = (_horner(r, _A) * q) / _horner(r, _B)
    lower = q < 0
    tail_p = p if lower else 1.0 - p
    tail_p = _at_least(tail_p, _SMALLEST64)
    t = _sqrt64(-_ln64(tail_p, True))
    near = t - 1.6
    far = t - 5.0
    near_tail = _horner(near, _C) / _horner(near, _DD)
    far_tail = _horner(far, _E) / _horner(far, _FF)
    tail = near_tail if t <= 5.0 else far_tail
    if lower:
        tail = -tail
    return central if abs(q) <= 0.425 else tail


@njit(**_INLINE)
def _bits53(a, b):
    return np.int64(((a >> _U(5)) << _U(26)) | (b >> _U(6)))


# -- the values of a group (see _fill_each, _fill_pairs) --------------------------------------


@njit(**_INLINE)
def _uniform32_group(params, j, w0, w1, w2, w3):
    top, first, second, offset, lo, hi = params
    # the generic path's u * W as (w & top) * f32(W * 2**-32), or (w & top) * 2**-32 * W where
    # that is not exact (the multiplications by 1 it adds change no bit)
    v = _F(np.int64(_word(j, w0, w1, w2, w3) & top)) * first
    v = v * second
    v = v + offset
    return _at_most(_at_least(v, lo), hi)


@njit(**_INLINE)
def _normal32_group(params, j, w0, w1, w2, w3):
    """Box-Muller on the pair ``(w[2j], w[2j + 1])``: the values ``4b + 2j`` and ``4b + 2j + 1``."""
    scale, offset = params
    a, b = (w0, w1) if j == 0 else (w2, w3)
    u1 = _F(np.int64(a + _U(1))) * _UNIT32
    radius = _sqrt32(_ln32(u1, 0) * _MINUS_TWO32)
    sin, cos = _sincos32(np.int64(b >> _U(8)))
    return (radius * cos) * scale + offset, (radius * sin) * scale + offset


@njit(**_INLINE)
def _trunc32_group(params, j, w0, w1, w2, w3):
    width, base, upper, shift, mirror, scale, offset, lo, hi = params
    w = _word(j, w0, w1, w2, w3)
    u = _F(np.int64(w * _U(2) + _U(1))) * _UNIT33
    p = u * width + base
    x = _trunc_ndtri32(p, w, width, upper, shift)
    if mirror:
        x = -x
    v = x * scale + offset
    return _at_most(_at_least(v, lo), hi)


@njit(**_INLINE)
def _bernoulli_group(params, j, w0, w1, w2, w3):
    (threshold,) = params
    return _word(j, w0, w1, w2, w3) < threshold


@njit(**_INLINE)
def _word_group(params, j, w0, w1, w2, w3):
    return np.int64(_word(j, w0, w1, w2, w3))


@njit(**_INLINE)
def _uniform64_group(params, j, w0, w1, w2, w3):
    width, low, hi = params
    a, b = (w0, w1) if j == 0 else (w2, w3)
    u = _D(_bits53(a, b)) * _UNIT53
    return _at_most(u * width + low, hi)


@njit(**_INLINE)
def _normal64_group(params, j, w0, w1, w2, w3):
    """Box-Muller on the block: its two float64 values (``j`` is 0)."""
    std, mean = params
    u1 = _D(_bits53(w0, w1) + 1) * _UNIT53
    radius = _sqrt64(_ln64(u1, False) * -2.0)
    sin, cos = _sincos64(_bits53(w2, w3))
    return (cos * radius) * std + mean, (sin * radius) * std + mean


@njit(**_INLINE)
def _trunc64_group(params, j, w0, w1, w2, w3):
    width, base, mirror, std, mean, low, high, lo, hi = params
    a, b = (w0, w1) if j == 0 else (w2, w3)
    k = np.int64(((a >> _U(6)) << _U(26)) | (b >> _U(6)))
    u = _D(k * 2 + 1) * _UNIT53
    x = _ndtri64(u * width + base)
    if mirror:
        x = -x
    v = _at_most(_at_least(x * std + mean, low), high)
    return _at_most(_at_least(v, lo), hi)


# -- the kernels -----------------------------------------------------------------------------
# Each is compiled (or loaded from numba's cache) on its first call, for the argument types
# hwrng._philox._compiled gives it (one set per kernel).


def _kernel(function):
    """``function`` compiled by numba, cached on disk where numba finds a writable place."""
    global cache_error, cache_dir
    dispatcher = njit(**_OPTIONS)(function)
    try:
        dispatcher.enable_caching()
    except RuntimeError as error:  # no writable cache directory: compile in every process
        cache_error = f"numba can write its cache nowhere here ({error}); set NUMBA_CACHE_DIR"
    else:
        cache_dir = getattr(getattr(dispatcher, "_cache", None), "_cache_path", None)
    return dispatcher


#: why numba could not cache the kernels on disk (None: it can)
cache_error: str | None = None
#: where it caches them (numba's choice: see hwrng._philox._compiled)
cache_dir: str | None = None


@_kernel
def uniform32(out, starts, length, k0, k1, c2, c3, top, first, second, offset, lo, hi):
    """float32 uniform values (``_distributions.uniform``'s float32 table)."""
    params = (top, first, second, offset, lo, hi)
    _fill_each(out, starts, length, k0, k1, c2, c3, 4, _uniform32_group, params)


@_kernel
def normal32(out, starts, length, k0, k1, c2, c3, scale, offset):
    """float32 normal values, Box-Muller on each pair of a block's words."""
    _fill_pairs(out, starts, length, k0, k1, c2, c3, 4, _normal32_group, (scale, offset))


@_kernel
def trunc32(
    out, starts, length, k0, k1, c2, c3, width, base, upper, shift, mirror, scale, offset, lo, hi
):
    """float32 truncated normal values, by the contract's inverse CDF."""
    params = (width, base, upper, shift, mirror, scale, offset, lo, hi)
    _fill_each(out, starts, length, k0, k1, c2, c3, 4, _trunc32_group, params)


@_kernel
def bernoulli(out, starts, length, k0, k1, c2, c3, threshold):
    """The Bernoulli mask ``w < threshold`` (bool)."""
    _fill_each(out, starts, length, k0, k1, c2, c3, 4, _bernoulli_group, (threshold,))


@_kernel
def words(out, starts, length, k0, k1, c2, c3):
    """Each element's word (int64), for thresholds that vary by element."""
    _fill_each(out, starts, length, k0, k1, c2, c3, 4, _word_group, (0,))


@_kernel
def uniform64(out, starts, length, k0, k1, c2, c3, width, low, hi):
    """float64 uniform values."""
    _fill_each(out, starts, length, k0, k1, c2, c3, 2, _uniform64_group, (width, low, hi))


@_kernel
def normal64(out, starts, length, k0, k1, c2, c3, std, mean):
    """float64 normal values."""
    _fill_pairs(out, starts, length, k0, k1, c2, c3, 2, _normal64_group, (std, mean))


@_kernel
def trunc64(out, starts, length, k0, k1, c2, c3, width, base, mirror, std, mean, low, high, lo, hi):
    """float64 truncated normal values."""
    params = (width, base, mirror, std, mean, low, high, lo, hi)
    _fill_each(out, starts, length, k0, k1, c2, c3, 2, _trunc64_group, params)


@_kernel
def apply_mask(out, source, kept, scale):
    """Dropout's output: ``x * scale`` where kept, ``x * 0`` where dropped, in ``x``'s dtype."""
    zero = scale - scale
    for i in range(out.size):
        x = source[i]
        out[i] = x * scale if kept[i] else x * zero


#: every kernel, by name
KERNELS = {
    "uniform32": uniform32,
    "normal32": normal32,
    "trunc32": trunc32,
    "bernoulli": bernoulli,
    "words": words,
    "uniform64": uniform64,
    "normal64": normal64,
    "trunc64": trunc64,
    "apply_mask": apply_mask,
}
