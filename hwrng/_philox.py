"""Placement-invariant random numbers: each value a pure function of (seed, position, index).

Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy
as 1, 2, 3", SC'11) -- the generator of CUDA and Ascend -- written in torch
tensor ops, so it runs on every platform's device and a rank computes only its
own shard's values.

Counter layout (a contract): key ``(seed & 0xFFFFFFFF, seed >> 32)``; counter
``(block & 0xFFFFFFFF, block >> 32, position & 0xFFFFFFFF, (position >> 32) |
0x80000000)``, where ``position`` is the op's position (its generator offset,
below ``2**63``) and the top bit keeps these blocks apart from torch's own CUDA
Philox counters. All four 32-bit words of a block are used.

Bit-to-float mapping (a contract), for global element index ``e``:

* float32, float16, bfloat16 uniform: word ``e % 4`` of block ``e // 4``;
  ``u = (w >> (32 - m)) * 2**-m`` with ``m`` the dtype's precision (24, 11, 8),
  exact in the dtype; value ``low + (high - low) * u`` in float64, rounded to
  float32 (then to the half type), and moved down to the largest value below
  ``high`` if rounding reached it;
* float64 uniform: block ``e // 2``, words ``2 * (e % 2)`` and ``2 * (e % 2) + 1``:
  ``u = ((w0 >> 5) * 2**26 + (w1 >> 6)) * 2**-53``;
* normal (Box-Muller within a block): 32-bit types use block ``e // 4``, pair
  ``(e % 4) // 2`` of words as ``u1 = ((w >> 8) + 1) * 2**-24`` in (0, 1] and
  ``u2`` as for uniform; float64 uses block ``e // 2`` and both pairs as 53-bit
  uniforms; ``z = sqrt(-2 ln u1) * (cos 2 pi u2 if e is even else sin 2 pi u2)``,
  value ``mean + std * z`` in float64, rounded once (via float32 for half types);
* Bernoulli: word as for float32 uniform; true iff ``w < round(p * 2**32)``;
* truncated normal: ``u = (w + 1/2) * 2**-32`` (two words, 53 bits, for float64),
  ``x = Phi^-1(Phi(alpha) + u * (Phi(beta) - Phi(alpha)))``, clamped to the bounds.

Bit for bit on every device: integer ops, and IEEE +, -, *, /, sqrt (correctly
rounded everywhere), each a separate torch op so no backend fuses them; ``ln``,
``sin``/``cos`` of ``2 pi u`` and ``Phi^-1`` are built from those here (the
libraries' ``log`` or ``erfinv`` differ between CPU and CUDA in the last bit).
Accuracy: ``ln`` and ``sin``/``cos`` within a few ulp of float64, ``Phi^-1``
within 1.2e-9 relative (Acklam's rational approximation; ample for float32 and
invisible in any statistic of float64 samples).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "Indices",
    "ShardIndices",
    "bernoulli_mask",
    "block_words",
    "flat_index",
    "normal",
    "philox4x32_10",
    "trunc_normal",
    "uniform",
]

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = 0xFFFFFFFF
_DOMAIN = 0x80000000
_ROUNDS = 10
_PRECISION = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}
_TWO_PI = 2 * math.pi


def _mulhilo(multiplier: int, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of ``multiplier * value`` (both < 2**32), with no overflow.

    ``value`` is split into 16-bit halves, so every product stays below 2**48.
    """
    high_half = (value >> 16) * multiplier
    low_half = (value & 0xFFFF) * multiplier
    low_sum = low_half + ((high_half & 0xFFFF) << 16)
    return (high_half >> 16) + (low_sum >> 32), low_sum & _MASK32


def philox4x32_10(
    counter: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], key: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Philox4x32-10 of ``counter`` (four int64 tensors of 32-bit values) under ``key``."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_ in range(_ROUNDS):
        if round_:
            k0, k1 = (k0 + _W0) & _MASK32, (k1 + _W1) & _MASK32
        hi0, lo0 = _mulhilo(_M0, c0)
        hi1, lo1 = _mulhilo(_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def _check(seed: int, position: int) -> None:
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    if not 0 <= position < 2**63:
        raise ValueError(f"position must be in [0, 2**63), got {position}")


def block_words(seed: int, position: int, block: torch.Tensor) -> torch.Tensor:
    """The four words of each Philox block, shape ``(*block.shape, 4)``, int64 in [0, 2**32)."""
    _check(seed, position)
    zeros = torch.zeros_like(block)
    c0, c1 = block & _MASK32, block >> 32
    c2 = zeros + (position & _MASK32)
    c3 = zeros + ((position >> 32) | _DOMAIN)
    words = philox4x32_10((c0, c1, c2, c3), (seed & _MASK32, seed >> 32))
    return torch.stack(words, dim=-1)


def _table(seed: int, position: int, blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The words of every block in ``blocks`` (each computed once), and where each element's is.

    A shard's global indices are ascending, so neighbours share blocks and
    ``unique_consecutive`` finds them in one pass.
    """
    unique, inverse = torch.unique_consecutive(blocks, return_inverse=True)
    return block_words(seed, position, unique), inverse


def _words(seed: int, position: int, index: torch.Tensor, per_block: int) -> torch.Tensor:
    """Each element's ``4 // per_block`` words (``per_block`` elements share a block)."""
    flat = index.reshape(-1).to(torch.int64)
    table, inverse = _table(seed, position, flat // per_block)
    width = 4 // per_block
    lane = (flat % per_block) * width
    return torch.stack([table[inverse, lane + j] for j in range(width)], dim=-1)


def flat_index(dim_indices: Sequence[torch.Tensor], global_shape: Sequence[int]) -> torch.Tensor:
    """Global flat indices of a local shard, from the global index along each dim.

    ``dim_indices[k]`` lists, in local order, the global positions along dim
    ``k`` that the shard holds (a range for ``Shard``, several for a strided
    shard); the result has the shard's shape.
    """
    if len(dim_indices) != len(global_shape):
        raise ValueError(f"{len(dim_indices)} index vectors for a {len(global_shape)}-d shape")
    stride = 1
    total: torch.Tensor | None = None
    for axis in range(len(global_shape) - 1, -1, -1):
        view = [1] * len(global_shape)
        view[axis] = -1
        term = dim_indices[axis].to(torch.int64).reshape(view) * stride
        total = term if total is None else total + term
        stride *= int(global_shape[axis])
    if total is None:
        device = dim_indices[0].device if dim_indices else None
        return torch.zeros((), dtype=torch.int64, device=device)
    return total.expand(*(len(v) for v in dim_indices)).contiguous()


@dataclass(frozen=True)
class ShardIndices:
    """A shard's global indices, described by one index vector per dim (see :func:`flat_index`).

    The fused kernel reads this description directly; the generic path
    materialises :meth:`flat`.
    """

    dims: tuple[torch.Tensor, ...]
    shape: tuple[int, ...]

    @property
    def device(self) -> torch.device:
        """Where the indices live."""
        return self.dims[0].device if self.dims else torch.device("cpu")

    def flat(self) -> torch.Tensor:
        """The global flat index of every element, in the shard's shape."""
        return flat_index(self.dims, self.shape)


Indices = torch.Tensor | ShardIndices


def _fused() -> Any:
    from hwrng import _philox_triton

    return _philox_triton


def _unit(words: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Uniform [0, 1) in float64 from an element's words, with the dtype's precision."""
    if dtype == torch.float64:
        high, low = words[:, 0] >> 5, words[:, 1] >> 6
        return (high * 67108864 + low).to(torch.float64) * 2.0**-53
    bits = _PRECISION[dtype]
    return (words[:, 0] >> (32 - bits)).to(torch.float64) * 2.0**-bits


def _round_to(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.float64:
        return values
    single = values.to(torch.float32)
    return single if dtype == torch.float32 else single.to(dtype)


def _check_dtype(dtype: torch.dtype) -> None:
    if dtype != torch.float64 and dtype not in _PRECISION:
        raise TypeError(f"{dtype} is not a floating dtype hwrng's invariant ops fill")


def uniform(
    seed: int,
    position: int,
    index: Indices,
    dtype: torch.dtype,
    *,
    low: float = 0.0,
    high: float = 1.0,
) -> torch.Tensor:
    """Uniform values in ``[low, high)`` for global indices ``index`` (see the mapping)."""
    _check_dtype(dtype)
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise ValueError(f"uniform needs finite low <= high, got [{low}, {high})")
    if isinstance(index, ShardIndices):
        _check(seed, position)
        if _fused().available(index.device):
            fused: torch.Tensor = _fused().uniform(
                seed, position, index.dims, index.shape, dtype, low=low, high=high
            )
            return fused
        index = index.flat()
    words = _words(seed, position, index, 2 if dtype == torch.float64 else 4)
    u = _unit(words, dtype)
    values = _below(_round_to(u * (high - low) + low, dtype), dtype, low, high)
    return values.reshape(index.shape)


def _below(values: torch.Tensor, dtype: torch.dtype, low: float, high: float) -> torch.Tensor:
    """Move values that rounding took to ``high`` down to the dtype's largest value below it."""
    if high <= low:
        return values
    top = torch.nextafter(
        torch.tensor(high, dtype=dtype, device=values.device),
        torch.tensor(low, dtype=dtype, device=values.device),
    )
    return torch.where(values >= high, top, values)


# -- elementary functions from +, -, *, /, sqrt: identical on every device ------------------

_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_SQRT_HALF = math.sqrt(0.5)


def _ln(x: torch.Tensor) -> torch.Tensor:
    """Natural log of positive float64 ``x``: exponent split exactly, atanh series for the rest."""
    mantissa, exponent = torch.frexp(x)  # x = mantissa * 2**exponent, mantissa in [0.5, 1)
    small = mantissa < _SQRT_HALF
    mantissa = torch.where(small, mantissa * 2, mantissa)
    exponent = (exponent - small.to(exponent.dtype)).to(torch.float64)
    s = (mantissa - 1) / (mantissa + 1)  # |s| < 0.1716: the series converges fast
    s2 = s * s
    series = torch.full_like(s2, 1 / 23)
    for k in range(21, 0, -2):
        series = series * s2 + 1 / k
    return (exponent * _LN2_HI + (s * series * 2 + exponent * _LN2_LO)).reshape(x.shape)


def _sin_poly(x: torch.Tensor) -> torch.Tensor:
    x2 = x * x
    acc = torch.full_like(x2, 1 / math.factorial(19))
    for n in range(17, 0, -2):
        acc = acc * -x2 + 1 / math.factorial(n)
    return acc * x


def _cos_poly(x: torch.Tensor) -> torch.Tensor:
    x2 = x * x
    acc = torch.full_like(x2, 1 / math.factorial(18))
    for n in range(16, -1, -2):
        acc = acc * -x2 + 1 / math.factorial(n)
    return acc


def _sincos_turns(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``sin`` and ``cos`` of ``2 pi u`` for ``u`` in [0, 1), reduced exactly on ``u``."""
    quarter = torch.floor(u * 4)  # exact: u * 4 is exact in binary
    r = u - quarter * 0.25  # in [0, 1/4), exact
    upper = r > 0.125
    t = torch.where(upper, 0.25 - r, r)  # in [0, 1/8], exact
    x = t * _TWO_PI
    s, c = _sin_poly(x), _cos_poly(x)
    s, c = torch.where(upper, c, s), torch.where(upper, s, c)  # sin(pi/2 - x) = cos x
    q = quarter.to(torch.int64) % 4
    sin = torch.where(q == 0, s, torch.where(q == 1, c, torch.where(q == 2, -s, -c)))
    cos = torch.where(q == 0, c, torch.where(q == 1, -s, torch.where(q == 2, -c, s)))
    return sin, cos


def normal(
    seed: int,
    position: int,
    index: Indices,
    dtype: torch.dtype,
    *,
    mean: float = 0.0,
    std: float = 1.0,
) -> torch.Tensor:
    """Normal values (Box-Muller within a block) for global indices ``index``."""
    _check_dtype(dtype)
    if not (math.isfinite(mean) and math.isfinite(std) and std >= 0):
        raise ValueError(f"normal needs a finite mean and std >= 0, got {mean}, {std}")
    index = index.flat() if isinstance(index, ShardIndices) else index
    flat = index.reshape(-1).to(torch.int64)
    if dtype == torch.float64:  # one pair per block: u1 from words 0, 1; u2 from words 2, 3
        table, inverse = _table(seed, position, flat // 2)
        words = table[inverse]
        u1 = 1.0 - _unit(words[:, 0:2], dtype)  # in (0, 1]
        u2 = _unit(words[:, 2:4], dtype)
    else:  # two pairs per block: the element's pair is words 2 * ((e % 4) // 2) and the next
        table, inverse = _table(seed, position, flat // 4)
        first = ((flat % 4) // 2) * 2
        u1 = ((table[inverse, first] >> 8) + 1).to(torch.float64) * 2.0**-24
        u2 = (table[inverse, first + 1] >> 8).to(torch.float64) * 2.0**-24
    radius = torch.sqrt(_ln(u1) * -2.0)
    sin, cos = _sincos_turns(u2)
    z = radius * torch.where(flat % 2 == 0, cos, sin)
    return _round_to(z * std + mean, dtype).reshape(index.shape)


def bernoulli_mask(
    seed: int, position: int, index: Indices, p: float | torch.Tensor
) -> torch.Tensor:
    """A boolean mask, True with probability ``p`` (a float or a broadcastable tensor)."""
    if isinstance(index, ShardIndices):
        _check(seed, position)
        if not isinstance(p, torch.Tensor) and 0.0 <= p <= 1.0 and _fused().available(index.device):
            mask: torch.Tensor = _fused().bernoulli_mask(seed, position, index.dims, index.shape, p)
            return mask
        index = index.flat()
    words = _words(seed, position, index, 4)[:, 0].reshape(index.shape)
    if isinstance(p, torch.Tensor):
        if bool(((p < 0) | (p > 1)).any()):
            raise ValueError("probabilities must lie in [0, 1]")
        threshold = torch.round(p.to(torch.float64) * 2.0**32).to(torch.int64)
        return words < threshold.to(words.device)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    return words < round(p * 2**32)


# Acklam's rational approximation of the inverse normal CDF (relative error < 1.15e-9).
_A = (
    -3.969683028665376e01,
    2.209460984245205e02,
    -2.759285104469687e02,
    1.383577518672690e02,
    -3.066479806614716e01,
    2.506628277459239e00,
)
_B = (
    -5.447609879822406e01,
    1.615858368580409e02,
    -1.556989798598866e02,
    6.680131188771972e01,
    -1.328068155288572e01,
)
_C = (
    -7.784894002430293e-03,
    -3.223964580411365e-01,
    -2.400758277161838e00,
    -2.549732539343734e00,
    4.374664141464968e00,
    2.938163982698783e00,
)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
_P_LOW = 0.02425


def _horner(coefficients: Sequence[float], x: torch.Tensor) -> torch.Tensor:
    acc = torch.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        acc = acc * x + c
    return acc


def _ndtri(p: torch.Tensor) -> torch.Tensor:
    """The inverse of the standard normal CDF, for ``p`` in (0, 1) (float64)."""
    tail_p = torch.where(p < 0.5, p, 1.0 - p).clamp_min(1e-300)
    q = torch.sqrt(_ln(tail_p) * -2.0)
    tail = _horner(_C, q) / (_horner(_D, q) * q + 1.0)
    tail = torch.where(p < 0.5, tail, -tail)
    centred = p - 0.5
    r = centred * centred
    central = _horner(_A, r) * centred / (_horner(_B, r) * r + 1.0)
    return torch.where((p >= _P_LOW) & (p <= 1 - _P_LOW), central, tail)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def trunc_normal(
    seed: int,
    position: int,
    index: Indices,
    dtype: torch.dtype,
    *,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
) -> torch.Tensor:
    """Normal values truncated to ``[a, b]`` (absolute bounds), by inverse CDF -- one draw each.

    ``Phi(alpha)`` and ``Phi(beta)`` are two numbers computed on the host, the same everywhere.
    """
    _check_dtype(dtype)
    if not (math.isfinite(mean) and math.isfinite(std) and std > 0 and a < b):
        raise ValueError(f"trunc_normal needs std > 0 and a < b, got std={std}, [{a}, {b}]")
    index = index.flat() if isinstance(index, ShardIndices) else index
    lower, upper = _phi((a - mean) / std), _phi((b - mean) / std)
    if dtype == torch.float64:
        u = (_unit(_words(seed, position, index, 2), dtype) * 2**53 + 0.5) * 2.0**-53
    else:
        u = (_words(seed, position, index, 4)[:, 0].to(torch.float64) + 0.5) * 2.0**-32
    p = u * (upper - lower) + lower  # in (lower, upper); _ndtri guards the far tails
    values = _ndtri(p) * std + mean
    return _round_to(values.clamp(a, b), dtype).reshape(index.shape)
