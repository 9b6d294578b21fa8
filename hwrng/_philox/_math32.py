"""float32 elementary functions of the Philox ops: the same bits on every device, no float64.

Results of float32, float16 and bfloat16 are computed with integer operations
and float32 ``+ - * /`` and comparisons alone -- each one torch op,
so correctly rounded to nearest even, never fused into a multiply-add, and
never an approximate division or a library transcendental (which differ
between CPU and CUDA, and between GPU models, in the last bits). Every
intermediate is a normal float32 or zero, so a device that flushes subnormals
computes the same bits.

* :func:`sqrt`: Newton's iteration (torch's own CPU ``sqrt`` is not correctly
  rounded, so it is not used).
* :func:`ln`: the exponent split off by integer arithmetic on the float's
  bits, the mantissa reduced to ``[sqrt(1/2), sqrt(2))``, then
  ``ln(1 + f) = f - (f**2/2 - s (f**2/2 + w G(w)))`` with ``s = f / (2 + f)``,
  ``w = s**2`` and ``G`` a degree-2 fit.
* :func:`sincos_turns`: sine and cosine of ``2 pi k / 2**24``; the reduction
  to an eighth of a turn is exact integer arithmetic on ``k``, then one odd
  polynomial (``sin``, degree 7, its leading term split as ``1.5 t + S0 t``)
  and one even polynomial (``cos``, degree 8) of ``t`` in ``[0, 1/2]``
  quarter turns.
* :func:`ndtri_central` and :func:`ndtri_tail`: the inverse normal CDF as
  rational functions of degree 4/4 in three regions, in the structure of
  Wichura's AS241 (the coefficients are fitted here).

The coefficients were fitted with mpmath (Lawson-weighted least squares on
Chebyshev nodes, relative error of the fit below 1.6e-9 for ``ln``, 8.1e-10
for ``sin``, 5.4e-11 for ``cos``, 3e-10 for the inverse CDF), then rounded to
float32. The error of the float32 evaluation, measured against the exact
values, is in ``docs/invariant.md`` (and checked in ``tests/test_philox32.py``).
Every constant below is a float32 value, written in hexadecimal to be exact.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import torch

from hwrng._philox._operands import Maker, operands_for

__all__ = [
    "COS_C",
    "LN2_HI",
    "LN2_LO",
    "LN_G",
    "NDTRI_CENTRAL_A",
    "NDTRI_CENTRAL_B",
    "NDTRI_FAR_A",
    "NDTRI_FAR_B",
    "NDTRI_NEAR_A",
    "NDTRI_NEAR_B",
    "SIN_S",
    "f32",
    "horner",
    "less_than",
    "ln",
    "ndtri_central",
    "ndtri_tail",
    "negate_where",
    "select",
    "sincos_turns",
    "sqrt",
]

_F32 = torch.float32


def f32(value: float) -> float:
    """``value`` rounded to the nearest float32 (ties to even), on the host."""
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


def _hex(*values: str) -> tuple[float, ...]:
    return tuple(float.fromhex(v) for v in values)


# ln 2 = LN2_HI + LN2_LO, LN2_HI with 13 significant bits: E * LN2_HI is exact for |E| < 2**11.
LN2_HI = float.fromhex("0x1.62ep-1")
LN2_LO = float.fromhex("0x1.0bfbe8p-15")
#: float32 bits of f32(sqrt(1/2)): the mantissa is reduced to [f32(sqrt(1/2)), 2 f32(sqrt(1/2)))
SQRT_HALF_BITS = 0x3F3504F3
#: G(w) = G0 + G1 w + G2 w**2 ~ sum_k 2 w**(k-1) / (2k + 1), w in [0, (3 - 2 sqrt 2)**2]
LN_G = _hex("0x1.55557ap-1", "0x1.995ebap-2", "0x1.31e2eep-2")
#: sin(pi t / 2) ~ 1.5 t + t (S0 + S1 t**2 + S2 t**4 + S3 t**6), t in [0, 1/2] (1.5 t is
#: exact, so the leading coefficient 1.5 + S0 costs no rounding)
SIN_S = _hex("0x1.21fb4ep-4", "-0x1.4abba6p-1", "0x1.465ap-4", "-0x1.2ced24p-8")
#: cos(pi t / 2) ~ 1 + t**2 (C0 + C1 t**2 + C2 t**4 + C3 t**6), t in [0, 1/2]
COS_C = _hex("-0x1.3bd3ccp+0", "0x1.03c1dep-2", "-0x1.55c664p-6", "0x1.d9f7bep-11")
#: Phi^-1(1/2 + q) ~ q A(r) / B(r), r = 0.180625 - q**2, for |q| <= 0.425
NDTRI_CENTRAL_A = _hex(
    "0x1.b18d92p+1", "0x1.1cbe1ap+6", "0x1.a780dp+8", "0x1.5ce02p+9", "0x1.2fa6p+7"
)
NDTRI_CENTRAL_B = _hex("0x1p+0", "0x1.805912p+4", "0x1.5e554ep+7", "0x1.9ad3f8p+8", "0x1.a31a48p+7")
#: -Phi^-1(p) ~ A(t - 1.625) / B(t - 1.625), t = sqrt(-ln p), for t <= 5
NDTRI_NEAR_A = _hex(
    "0x1.774f5ep+0", "0x1.a7772ap+1", "0x1.2320eep+1", "0x1.2bc982p-1", "0x1.84a496p-5"
)
NDTRI_NEAR_B = _hex("0x1p+0", "0x1.188bd6p+0", "0x1.712e7p-2", "0x1.12915cp-5", "0x1.729b36p-21")
#: -Phi^-1(p) ~ A(t - 5) / B(t - 5) for t > 5
NDTRI_FAR_A = _hex(
    "0x1.aa1b1cp+2", "0x1.e147eap+1", "0x1.764538p-1", "0x1.d15cf4p-5", "0x1.746f22p-10"
)
NDTRI_FAR_B = _hex("0x1p+0", "0x1.602efap-2", "0x1.1ffc12p-5", "0x1.075526p-10", "0x1.aaf996p-32")
#: |q| <= CENTRAL_LIMIT takes the central fit; R0 = 0.180625 (both as float32)
CENTRAL_LIMIT = float.fromhex("0x1.b33334p-2")
R0 = float.fromhex("0x1.71eb86p-3")
#: bits(guess of sqrt(v)) = (bits(v) >> 1) + SQRT_SEED, within 3.5%
SQRT_SEED = 0x1FBB4F2D
NEAR_OFFSET = 1.625
FAR_OFFSET = 5.0
_FAR_BITS = 0x40A00000  # float32 bits of 5.0
#: float32 bits of CENTRAL_LIMIT
CENTRAL_LIMIT_BITS = 0x3ED9999A
_SIGN = -(2**31)  # the float32 sign bit, as an int32


def horner(coefficients: Sequence[float], x: torch.Tensor) -> torch.Tensor:
    """``sum_k coefficients[k] * x**k`` by Horner's rule: one multiply, then one add, a step.

    Each step is its own torch op, so each is rounded in ``x``'s dtype (float32 here, float64
    in :mod:`hwrng._philox._math`) and never fused into a multiply-add.
    """
    c = operands_for(x)
    acc = x * c(coefficients[-1])
    acc.add_(c(coefficients[-2]))
    for value in coefficients[-3::-1]:
        acc.mul_(x).add_(c(value))
    return acc


def _int32(like: torch.Tensor) -> Maker:
    return Maker(torch.int32, like.is_cpu)


def ln(x: torch.Tensor, exponent: int = 0) -> torch.Tensor:
    """``ln(x * 2**exponent)`` for positive normal float32 ``x`` (``|exponent| < 1900``).

    Examples
    --------
    >>> ln(torch.tensor([1.0, 0.5, 2.0**-30])).tolist()
    [0.0, -0.6931471824645996, -20.794414520263672]
    """
    c, i = operands_for(x), _int32(x)
    bits = x.view(torch.int32)
    k = (bits - i(SQRT_HALF_BITS)).bitwise_right_shift_(i(23))
    z = (bits - (k << i(23))).view(_F32)  # in [f32(sqrt(1/2)), 2 f32(sqrt(1/2))), exactly
    if exponent:
        k.add_(i(exponent))
    e = k.to(_F32)
    f = z.sub_(c(1.0))  # exact (Sterbenz)
    s = f / (f + c(2.0))
    w = s * s
    tail = horner(LN_G, w).mul_(w)
    half_square = (f * f).mul_(c(0.5))
    inner = (half_square + tail).mul_(s).add_(e * c(LN2_LO))
    return f.sub_(half_square.sub_(inner)).add_(e.mul_(c(LN2_HI)))


def sqrt(v: torch.Tensor) -> torch.Tensor:
    """``sqrt(v)`` for float32 ``v`` normal or zero: Newton's iteration from a bit-level guess.

    Not the library's square root: torch's CPU ``sqrt`` (MKL's) is not
    correctly rounded, so it differs from CUDA's in the last bit. The guess
    ``(bits(v) >> 1) + SQRT_SEED`` is within 3.5% of ``sqrt(v)``; three steps
    ``y = (v / y + y) * 0.5`` bring it within 0.75 ulp (every float32 in
    ``[1, 4)`` checked, and the error repeats with the exponent). ``sqrt(+0)`` and
    ``sqrt(-0)`` are ``+0`` (``-0`` is Box-Muller's ``-2 ln(1)``; the iteration
    would start from a negative guess there).

    Examples
    --------
    >>> sqrt(torch.tensor([0.0, -0.0, 4.0, 2.0])).tolist()
    [0.0, 0.0, 2.0, 1.4142135381698608]
    """
    c, i = operands_for(v), _int32(v)
    bits = v.view(torch.int32)
    y = (bits >> i(1)).add_(i(SQRT_SEED)).view(_F32)
    for _ in range(3):
        y = (v / y).add_(y).mul_(c(0.5))
    # all ones but where v is +0 or -0 (its magnitude's bits negated are then 0, not negative)
    nonzero = (bits & i(0x7FFFFFFF)).neg_().bitwise_right_shift_(i(31))
    y.view(torch.int32).bitwise_and_(nonzero)
    return y


def select(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a`` where the int32 ``mask`` is -1 (all bits set), ``b`` where it is 0; bit for bit.

    Integer operations on the floats' bits (``torch.where`` is several times
    slower on the CPU).
    """
    bits = b.view(torch.int32)
    return (a.view(torch.int32) ^ bits).bitwise_and_(mask).bitwise_xor_(bits).view(_F32)


def negate_where(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``-x`` where the int32 ``mask`` is -1, else ``x``: the sign bit flipped, in place."""
    x.view(torch.int32).bitwise_xor_(mask & _int32(mask)(_SIGN))
    return x


def sincos_turns(k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``sin`` and ``cos`` of ``2 pi k / 2**24`` for integers ``k`` in ``[0, 2**24)``.

    The quadrant is ``k``'s top two bits; the rest ``m`` a fraction of a
    quarter turn, folded to ``t = m / 2**22`` or ``t = (2**22 - m) / 2**22``
    so that ``t <= 1/2`` (exact); then ``sin(pi t / 2)`` and ``cos(pi t / 2)``
    by polynomials, swapped and signed by the quadrant and the fold.

    Examples
    --------
    >>> sin, cos = sincos_turns(torch.tensor([0, 2**22, 2**23]))
    >>> sin.tolist(), cos.tolist()
    ([0.0, 1.0, -0.0], [1.0, -0.0, -1.0])
    """
    k = k.to(torch.int32, copy=True)  # modified below
    i = _int32(k)
    # t = (2**21 - |m - 2**21|) / 2**22, m = k mod 2**22: exact in float32
    t = (k & i(0x3FFFFF)).to(_F32)
    c = operands_for(t)
    t.sub_(c(2.0**21)).abs_().neg_().add_(c(2.0**21)).mul_(c(2.0**-22))
    w = t * t
    sin_t = horner(SIN_S, w).mul_(t)
    sin_t.add_(t.mul_(c(1.5)))  # t is not needed past here
    cos_t = horner(COS_C, w).mul_(w).add_(c(1.0))
    # bits 23, 22, 21 of k (the quadrant's two bits, the fold) moved to the sign bit
    bit23, bit22 = k << i(8), k << i(9)
    bit21 = k.bitwise_left_shift_(i(10))
    # swapped where the fold differs from the quadrant's parity
    swap = bit21.bitwise_xor_(bit22).bitwise_right_shift_(i(31))
    sin_bits, cos_bits = sin_t.view(torch.int32), cos_t.view(torch.int32)
    difference = (sin_bits ^ cos_bits).bitwise_and_(swap)
    # negative: the cosine in quadrants 1 and 2 (bit 23 xor bit 22), the sine in 2 and 3
    sign = i(_SIGN)
    cos_bits.bitwise_xor_(difference).bitwise_xor_(bit22.bitwise_xor_(bit23).bitwise_and_(sign))
    sin_bits.bitwise_xor_(difference).bitwise_xor_(bit23.bitwise_and_(sign))
    return sin_t, cos_t


def ndtri_central(q: torch.Tensor) -> torch.Tensor:
    """``Phi^-1(1/2 + q)`` for float32 ``|q| <= 0.425``: ``q A(r) / B(r)``, ``r = R0 - q**2``."""
    r = (q * q).neg_().add_(operands_for(q)(R0))
    return (q * horner(NDTRI_CENTRAL_A, r)).div_(horner(NDTRI_CENTRAL_B, r))


def ndtri_tail(t: torch.Tensor) -> torch.Tensor:
    """``-Phi^-1(p)`` from float32 ``t = sqrt(-ln p) >= 1.6``: one fit to 5, another past it."""
    c = operands_for(t)
    near = t - c(NEAR_OFFSET)
    far = t - c(FAR_OFFSET)
    beyond = less_than(_FAR_BITS, t)  # t > 5 (t >= 0, or NaN: then beyond too)
    return select(
        beyond,
        horner(NDTRI_FAR_A, far).div_(horner(NDTRI_FAR_B, far)),
        horner(NDTRI_NEAR_A, near).div_(horner(NDTRI_NEAR_B, near)),
    )


def less_than(limit_bits: int, x: torch.Tensor) -> torch.Tensor:
    """-1 (int32) where ``limit < |x|`` (``limit`` given by its float32 bits), else 0.

    Compares the bits of ``|x|`` as integers: non-negative floats order as
    their bit patterns do.
    """
    i = _int32(x)
    magnitude = x.view(torch.int32) & i(0x7FFFFFFF)
    return magnitude.neg_().add_(i(limit_bits)).bitwise_right_shift_(i(31))
