"""Elementary functions for the Philox ops, bit for bit the same on every device.

The libraries' ``log``, ``sin``, ``cos`` and ``erfinv`` differ between CPU and
CUDA in the last bits, which would break the bit-identity the Philox ops
promise, so the ones needed are built here from IEEE ``+ - * /``, ``sqrt``,
comparisons and integer bit operations on float64 (each one torch op, so no
backend fuses or reorders them):

* ``ln``: exponent split by integer arithmetic on the float's bits, mantissa
  reduced to ``[sqrt(1/2), sqrt(2))``, ``ln(1 + f) = 2 atanh(s)`` with a
  degree-6 minimax fit in ``s**2``; measured error below 0.77 ulp
  (1.5e-16 relative), subnormals included.
* sin and cos of ``2 pi u``: the reduction is exact, on the integer ``u * 2**B``
  itself (quadrant from the top two bits, the rest ``s`` in ``[0, 1)``, and
  ``1 - s`` for the complementary angle); then one odd polynomial for
  ``sin(pi s / 2)`` on ``[0, 1]`` (degree 17, minimax); measured error below
  3.3e-16 absolute (under 3 ulp).
* ``Phi^-1``: rational minimax fits (degree 7/7) in three regions: ``q = p -
  1/2`` for ``|q| <= 0.425``, else ``t = sqrt(-ln(min(p, 1 - p)))`` below and
  above 5 (the structure of Wichura's AS241; the coefficients are fitted
  here); measured error below 7.7e-16 relative, down to subnormal ``p``.
* ``Phi`` (two numbers per truncated-normal op): exact decimal arithmetic on
  the host, identical on every machine.

The fits were made with mpmath (Lawson-weighted least squares at 50-60 digits
on Chebyshev nodes; the fitting error is below 1e-16 everywhere); the errors
above are those of the float64 evaluation, measured against mpmath at 40
digits on 20,000 to 40,000 points each.
"""

from __future__ import annotations

import decimal
import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from hwrng._philox._math32 import f32, horner

__all__ = [
    "LN2_HI",
    "LN2_LO",
    "LN_G",
    "NDTRI_A",
    "NDTRI_B",
    "NDTRI_C",
    "NDTRI_D",
    "NDTRI_E",
    "NDTRI_F",
    "SIN_H",
    "SQRT_SEED",
    "TailScale",
    "ln",
    "ndtri",
    "phi",
    "phi_interval",
    "sin_half_pi",
    "sincos_turns",
    "sqrt",
    "standard_bounds",
    "tail_scale",
]

# ln 2 split so that E * LN2_HI is exact for every binary exponent E (|E| < 2**11).
_LN2 = Fraction(decimal.Decimal("0.69314718055994530941723212145817656807550013436026"))
LN2_HI = float(Fraction(math.floor(_LN2 * 2**42), 2**42))
LN2_LO = float(_LN2 - Fraction(LN2_HI))
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD  # float64 bits of sqrt(1/2)
_TINY = 2.0**-1022

# ln(1 + f) = 2 atanh(s), s = f / (2 + f): the part past 2 s is s * w * G(w), w = s**2,
# w in [0, (3 - 2 sqrt 2)**2]; G is a minimax fit of sum_k 2 w**(k-1) / (2k + 1).
LN_G = (
    0.666666666666667,
    0.3999999999989918,
    0.28571428626105216,
    0.2222221111596554,
    0.18182890360220086,
    0.15331684277078397,
    0.1461687262071314,
)
# sin(pi s / 2) = s * H(s**2) on [0, 1], H a minimax fit.
SIN_H = (
    1.5707963267948966,
    -0.6459640975062462,
    0.07969262624616544,
    -0.004681754135302642,
    0.00016044118470682188,
    -3.598843007208267e-06,
    5.6921348726697196e-08,
    -6.6843217176587e-10,
    5.870610908353702e-12,
)
# Phi^-1: q * A(r) / B(r), r = 0.425**2 - q**2 for |q| = |p - 1/2| <= 0.425; else with
# t = sqrt(-ln(min(p, 1 - p))): C(t - 1.6) / D(t - 1.6) for t <= 5, E(t - 5) / F(t - 5) above.
NDTRI_A = (
    3.3871328727963665,
    133.14554890427803,
    1971.717356546649,
    13733.152090316986,
    45929.15240771769,
    67280.35657223316,
    33440.16262159287,
    2509.9989939375805,
)
NDTRI_B = (
    1.0,
    42.314476512125445,
    687.2277704872092,
    5394.723798885302,
    21216.845165364008,
    39315.68671694865,
    28736.594702464714,
    5228.233754805493,
)
NDTRI_C = (
    1.4234371107496837,
    4.633274563953665,
    5.778518835015485,
    3.657899153282237,
    1.2756295916938702,
    0.2430478035892516,
    0.02285818038935912,
    0.0007790051602072133,
)
NDTRI_D = (
    1.0,
    2.0552547439858646,
    1.6802475421828094,
    0.6923724291631494,
    0.14886456699081177,
    0.01528864060869567,
    0.0005507473685143131,
    1.0510204509729457e-09,
)
NDTRI_E = (
    6.657904643501104,
    5.4622317025881095,
    1.7836607840930394,
    0.29622195248969857,
    0.02648425219708995,
    0.0012392597550706266,
    2.7005342002070696e-05,
    1.998349617376758e-07,
)
NDTRI_F = (
    1.0,
    0.5995989186583931,
    0.1368063006821919,
    0.014851485369443434,
    0.0007848298596584134,
    1.838948452257125e-05,
    1.413037352611529e-07,
    2.0101374982998135e-15,
)


def ln(x: torch.Tensor, subnormal: bool = True) -> torch.Tensor:
    """Natural logarithm of positive finite float64 ``x`` (``subnormal``: x may be below 2**-1022).

    Examples
    --------
    >>> ln(torch.tensor([1.0, 0.5], dtype=torch.float64)).tolist()
    [0.0, -0.6931471805599453]
    """
    if subnormal:
        small = x < _TINY
        x = torch.where(small, x * 2.0**54, x)
    bits = x.view(torch.int64)
    # k = floor(log2(x / sqrt(1/2))); z = x / 2**k in [sqrt(1/2), sqrt(2)), exactly
    k = (bits - _SQRT_HALF_BITS) >> 52
    z = (bits - (k << 52)).view(torch.float64)
    if subnormal:
        k.sub_(small.to(torch.int64).mul_(54))
    exponent = k.to(torch.float64)
    f = z - 1.0  # exact (Sterbenz)
    s = f / (f + 2.0)
    w = s * s
    tail = horner(LN_G, w).mul_(w)
    half_square = (f * f).mul_(0.5)
    # ln(1 + f) = f - (f**2 / 2 - s * (f**2 / 2 + tail)), each term small next to f
    inner = (half_square + tail).mul_(s).add_(exponent * LN2_LO)
    return (half_square - inner).neg_().add_(f).add_(exponent * LN2_HI)


#: bits(guess of sqrt(v)) = (bits(v) >> 1) + SQRT_SEED, within 3.5%
SQRT_SEED = 0x1FF769E1AE000000


def sqrt(v: torch.Tensor) -> torch.Tensor:
    """``sqrt(v)`` for float64 ``v`` normal or zero: Newton's iteration from a bit-level guess.

    torch's CPU ``sqrt`` (MKL's) is not correctly rounded; four steps
    ``y = (v / y + y) * 0.5`` from a guess within 3.5% give a deterministic
    result within an ulp, on every device. ``sqrt(+0)`` and ``sqrt(-0)`` are ``+0``.

    Examples
    --------
    >>> sqrt(torch.tensor([0.0, -0.0, 4.0], dtype=torch.float64)).tolist()
    [0.0, 0.0, 2.0]
    """
    bits = v.view(torch.int64)
    y = ((bits >> 1) + SQRT_SEED).view(torch.float64)
    for _ in range(4):
        y = (v / y).add_(y).mul_(0.5)
    # all ones but where v is +0 or -0 (its magnitude's bits negated are then 0, not negative)
    nonzero = (bits & 0x7FFFFFFFFFFFFFFF).neg_().bitwise_right_shift_(63)
    y.view(torch.int64).bitwise_and_(nonzero)
    return y


def sin_half_pi(s: torch.Tensor) -> torch.Tensor:
    """``sin(pi * s / 2)`` for float64 ``s`` in ``[0, 1]``."""
    return horner(SIN_H, s * s).mul_(s)


def sincos_turns(k: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``sin`` and ``cos`` of ``2 pi k / 2**bits`` for integers ``k`` in ``[0, 2**bits)``.

    The reduction is exact: the quadrant is ``k``'s top two bits, the rest a
    fraction ``s`` of a quarter turn, and ``1 - s`` (exact) gives the
    complementary angle, so one polynomial serves both.
    """
    quadrant = k >> (bits - 2)
    s = (k & ((1 << (bits - 2)) - 1)).to(torch.float64).mul_(2.0 ** (2 - bits))
    near = sin_half_pi(s)  # sin of the angle past the quadrant start
    far = sin_half_pi(1.0 - s)  # its cos
    odd = (quadrant & 1).bool()
    sin = torch.where(odd, far, near)
    cos = torch.where(odd, near, far)
    sin = torch.where(quadrant >= 2, -sin, sin)
    cos = torch.where((quadrant == 1) | (quadrant == 2), -cos, cos)
    return sin, cos


def ndtri(p: torch.Tensor) -> torch.Tensor:
    """The inverse standard normal CDF of float64 ``p`` in ``[0, 1]`` (0 and 1 give -/+38.5)."""
    q = p - 0.5
    r = 0.180625 - q * q
    central = horner(NDTRI_A, r).mul_(q).div_(horner(NDTRI_B, r))
    lower = q < 0
    tail_p = torch.where(lower, p, 1.0 - p).clamp_(min=math.ulp(0.0))
    t = sqrt(ln(tail_p).neg_())
    near = t - 1.6
    far = t - 5.0
    tail = torch.where(
        t <= 5.0,
        horner(NDTRI_C, near).div_(horner(NDTRI_D, near)),
        horner(NDTRI_E, far).div_(horner(NDTRI_F, far)),
    )
    tail = torch.where(lower, -tail, tail)
    return torch.where(q.abs() <= 0.425, central, tail)


def _decimal_pi() -> decimal.Decimal:
    """Pi to the current decimal precision (Machin's formula)."""

    def arctan_inverse(n: int) -> decimal.Decimal:
        power = decimal.Decimal(1) / n
        total, k, square = power, 1, n * n
        eps = decimal.Decimal(10) ** (-decimal.getcontext().prec - 2)
        while power > eps:
            power /= square
            term = power / (2 * k + 1)
            total += -term if k % 2 else term
            k += 1
        return total

    with decimal.localcontext() as ctx:
        ctx.prec += 5
        value = 16 * arctan_inverse(5) - 4 * arctan_inverse(239)
    return +value


def _phi_decimal(x: float) -> decimal.Decimal:
    """The standard normal CDF at ``x`` in the current decimal context (enough precision).

    ``Phi(x) = 1/2 + phi(x) * sum_n x**(2n+1) / (2n+1)!!``; every term of the
    sum has the sign of ``x``, and the working precision covers the
    cancellation in the lower tail.
    """
    value = decimal.Decimal(x)
    square = value * value
    term, total, n = value, value, 0
    eps = decimal.Decimal(10) ** (-decimal.getcontext().prec)
    while n < square or abs(term) > eps * abs(total):
        n += 1
        term = term * square / (2 * n + 1)
        total += term
    density = (-square / 2).exp() / (2 * _decimal_pi()).sqrt()
    return decimal.Decimal("0.5") + density * total


_BOUND = 40.0  # beyond, Phi is 0 or 1 in float64
#: digits kept past float64's 17 (1e-30 relative) in Phi and its differences, cancellations included
_GUARD = 30


def _base_precision(alpha: float, beta: float) -> int:
    """Digits enough for Phi and 1 - Phi at ``alpha``, ``beta`` (the tails cancel 0.22 x**2)."""
    return 17 + _GUARD + math.ceil(0.22 * max(alpha * alpha, beta * beta))


def _phis(alpha: float, beta: float) -> tuple[decimal.Decimal, decimal.Decimal, int]:
    """``Phi(alpha)``, ``Phi(beta)`` and the decimal precision to work on them at.

    ``alpha`` and ``beta`` are clamped to ``[-40, 40]``. The precision keeps
    ``Phi(beta) - Phi(alpha)`` and ``1 - Phi(beta)`` good to 1e-30 relative
    even where they cancel (close bounds, far tails), so each rounds to the
    float64 nearest the exact value unless that value lies within 1e-30
    (relative) of a midpoint between two doubles.
    """
    base = _base_precision(alpha, beta)
    precision = base
    while True:
        with decimal.localcontext() as ctx:
            ctx.prec = precision
            ctx.rounding = decimal.ROUND_HALF_EVEN
            low, high = _phi_decimal(alpha), _phi_decimal(beta)
            width = high - low
        if width > 0:
            # the digits that Phi(beta) - Phi(alpha) loses to cancellation
            lost = (high / width).adjusted() + 1
            if lost <= precision - base:
                return low, high, precision
            precision = base + lost + 2
        elif alpha == beta:
            return low, high, precision
        else:  # Phi(beta) - Phi(alpha) > 0 cancelled to nothing: twice the digits
            precision *= 2


def _clamped(alpha: float, beta: float) -> tuple[float, float]:
    return max(-_BOUND, min(_BOUND, alpha)), max(-_BOUND, min(_BOUND, beta))


@functools.lru_cache(maxsize=256)
def phi_interval(alpha: float, beta: float) -> tuple[float, float]:
    """``Phi(alpha)`` and ``Phi(beta) - Phi(alpha)`` as float64, each the nearest double.

    From decimal arithmetic (:func:`_phis`); ``alpha`` and ``beta`` clamped to
    ``[-40, 40]`` (infinite bounds included).
    """
    low, high, precision = _phis(*_clamped(alpha, beta))
    with decimal.localcontext() as ctx:
        ctx.prec = precision
        ctx.rounding = decimal.ROUND_HALF_EVEN
        return float(low), float(high - low)


def standard_bounds(mean: float, std: float, a: float, b: float) -> tuple[float, float, bool]:
    """The truncated normal's bounds ``[a, b]`` in standard units, mirrored into the lower half.

    ``(alpha, beta, mirror)``: ``alpha = (a - mean) / std`` and ``beta = (b - mean) / std``,
    negated and swapped where ``alpha + beta > 0`` (``mirror``: the values drawn on
    ``[alpha, beta]`` are then negated), so that ``alpha + beta <= 0`` as :func:`tail_scale`
    needs. ``mirror`` is False for ``a = -inf`` and ``b = +inf`` (their sum is NaN).
    """
    alpha, beta = (a - mean) / std, (b - mean) / std
    mirror = alpha + beta > 0
    if mirror:
        alpha, beta = -beta, -alpha
    return alpha, beta, mirror


@dataclass(frozen=True)
class TailScale:
    """The truncated normal's probabilities for the float32 path, scaled into float32's range.

    ``p = u * width + base`` runs over ``[Phi(alpha), Phi(beta)]`` scaled by
    ``2**shift``, with ``shift`` chosen so that no value is subnormal; ``upper``
    is ``1 - Phi(beta)`` (0 unless ``shift == 0``). Each is a float32
    value (and 0 where it is below ``2**-100``: too small to change a sum).
    """

    shift: int
    base: float
    width: float
    upper: float


def _tiny_to_zero(value: float) -> float:
    return 0.0 if value < 2.0**-100 else value


@functools.lru_cache(maxsize=256)
def tail_scale(alpha: float, beta: float) -> TailScale:
    """:class:`TailScale` for ``alpha <= beta`` with ``alpha + beta <= 0``, in decimal arithmetic.

    ``shift`` is 0 when ``Phi(beta) > 1/16``; otherwise the one that puts
    ``Phi(beta) * 2**shift`` in ``(1/4, 1/2]``. The values are rounded to
    float64 (each the nearest double: see :func:`_phis`), then to float32.
    """
    low, high, precision = _phis(*_clamped(alpha, beta))
    with decimal.localcontext() as ctx:
        ctx.prec = precision
        ctx.rounding = decimal.ROUND_HALF_EVEN
        shift = 0
        if high <= decimal.Decimal(1) / 16:
            while high * 2**shift <= decimal.Decimal(1) / 4:
                shift += 1
        scale = decimal.Decimal(2) ** shift
        return TailScale(
            shift=shift,
            base=_tiny_to_zero(f32(float(low * scale))),
            width=_tiny_to_zero(f32(float((high - low) * scale))),
            upper=_tiny_to_zero(f32(float(1 - high))) if shift == 0 else 0.0,
        )


def phi(x: float) -> float:
    """The standard normal CDF at ``x``, correctly rounded to float64 (host only)."""
    return phi_interval(x, x)[0]
