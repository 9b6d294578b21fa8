"""The generic path of the Philox ops: uniform, normal, Bernoulli and truncated normal.

Every value is a pure function of (seed, position, element index), computed
in plain torch ops, so it runs on every torch device and gives the same bits
on all of them. The words come from :mod:`hwrng._philox._bits` (the counter
layout), the float kernels from :mod:`hwrng._philox._math`.

Bit-to-float mapping (a contract)
---------------------------------
``e`` is an element's global flat index (row-major in the global shape),
``m`` a dtype's precision in bits (float32: 24, float16: 11, bfloat16: 8), and
``r64(x)`` the float64 nearest ``x`` (ties to even). Every float operation is
one IEEE operation (``+ - * /`` and ``sqrt``, correctly rounded), done as a
separate op in the order written, never fused into a multiply-add; every
narrowing conversion rounds to nearest even.

uniform, float32 / float16 / bfloat16
    word ``w = w[e % 4]`` of block ``e // 4``; ``u = (w >> (32 - m)) * 2**-m``,
    exact in the dtype. For ``(low, high) = (0, 1)`` the value is ``u``.
    Otherwise ``v = r64(r64(u * r64(high - low)) + low)`` in float64, rounded
    to float32 (float16 and bfloat16: to float32 first, then to the dtype).
    The result is then clamped to ``[lo, hi]``, where ``lo`` is the smallest
    value of the dtype ``>= low`` and ``hi`` the largest ``< high``: so a
    value that rounding carried up to ``high`` (or below ``low``) moves to the
    nearest value inside ``[low, high)``. ``low == high`` gives ``low``.
uniform, float64
    block ``e // 2``, words ``a = w[2 * (e % 2)]``, ``b = w[2 * (e % 2) + 1]``;
    ``k = (a >> 5) * 2**26 + (b >> 6)`` (53 bits), ``u = k * 2**-53``; the
    affine step as above in float64, clamped to the largest double ``< high``.
normal, float32 / float16 / bfloat16 (Box-Muller within a block)
    block ``e // 4``, pair ``j = (e % 4) // 2``, words ``a = w[2j]``,
    ``b = w[2j + 1]``: ``u1 = (a + 1) * 2**-32`` in ``(0, 1]`` and the angle
    ``2 pi b / 2**32``; ``z = sqrt(-2 ln u1) * (cos if e is even else sin)``
    of that angle; ``v = r64(r64(z * std) + mean)``, rounded to float32
    (half types: then to the dtype).
normal, float64
    block ``e // 2``; ``u1 = (k01 + 1) * 2**-53`` with ``k01`` the 53-bit
    integer of words 0 and 1 (as for uniform), the angle ``2 pi k23 / 2**53``
    from words 2 and 3; ``e % 2`` picks cos (0) or sin (1).
Bernoulli
    the word of float32 uniform; true iff ``w < t`` with the integer threshold
    ``t = round_half_even(p * 2**32)`` (so ``p = 0`` never and ``p = 1``
    always; ``p`` is exact in float64, tensor probabilities are converted to
    float64 first).
truncated normal (``torch.nn.init.trunc_normal_`` with absolute bounds a, b)
    by inverse CDF, one draw per element, no rejection. ``alpha = (a - mean) /
    std``, ``beta = (b - mean) / std``; if ``alpha + beta > 0`` the problem is
    mirrored (``alpha, beta = -beta, -alpha`` and the result negated) so that
    the probabilities used are the small, precisely represented ones. ``P0 =
    Phi(alpha)`` and ``D = Phi(beta) - Phi(alpha)`` are computed once on the
    host in exact decimal arithmetic and rounded to float64. float32/16/bf16:
    ``u = (2 w + 1) * 2**-33`` from the float32 word; float64: ``u = (2 k + 1)
    * 2**-53`` with ``k = (a >> 6) * 2**26 + (b >> 6)`` (52 bits) from the
    float64 words. ``x = Phi^-1(r64(r64(u * D) + P0))`` (negated if
    mirrored), ``v = r64(r64(x * std) + mean)`` clamped to ``[a, b]`` in
    float64, rounded as for normal and clamped again to the dtype's values in
    ``[a, b]``.

Bit-identity across devices rests on correctly rounded float64 ``+ - * /
sqrt`` and round-to-nearest-even conversions -- true of torch's CPU and CUDA
kernels; a device without float64 arithmetic cannot run the float ops here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hwrng._exceptions import InvalidValueError
from hwrng._philox._bits import Words, layout_words
from hwrng._philox._math import ln, ndtri, phi_interval, sincos_turns
from hwrng._philox._parameters import (
    PRECISION,
    checked_index,
    checked_seed_position,
    normal_parameters,
    probabilities_broadcast,
    probability,
    trunc_normal_parameters,
    uniform_parameters,
)

__all__ = ["bernoulli_mask", "normal", "trunc_normal", "uniform"]

_Table = Callable[[Words], torch.Tensor]

# Elements per chunk. On the CPU a chunk's temporaries stay in the last-level cache (2-4x
# faster than whole-tensor passes, measured) while each op is still large enough to run on
# every core; elsewhere chunks only bound the temporaries' memory.
_CPU_CHUNK = 1 << 19
_DEVICE_CHUNK = 1 << 22


def _element_values(
    seed: int, position: int, e: torch.Tensor, per_block: int, table: _Table
) -> torch.Tensor:
    """The values of elements ``e`` (1-D, non-empty), ``per_block`` elements to a block.

    ``table`` maps a batch of blocks' words to their elements' values, shape
    ``(blocks, per_block)``. Each block is computed once: for one contiguous
    run of indices (the usual shard) the values are a slice of the table; for
    any other index set the blocks are deduplicated with ``unique_consecutive``
    (neighbours share blocks) and the values gathered.
    """
    shift = per_block.bit_length() - 1
    count = e.numel()
    first, last = int(e[0]), int(e[-1])
    if (
        first >= 0
        and last - first == count - 1
        and (
            count <= 2
            or torch.equal(e, torch.arange(count, dtype=torch.int64, device=e.device).add_(first))
        )
    ):
        start, stop = first >> shift, last >> shift
        blocks = torch.arange(start, stop + 1, dtype=torch.int64, device=e.device)
        values = table(layout_words(seed, position, blocks, small=stop < 2**32))
        offset = first - (start << shift)
        return values.reshape(-1)[offset : offset + count]
    blocks, where = torch.unique_consecutive(e >> shift, return_inverse=True)
    low, high = torch.aminmax(blocks)
    if int(low) < 0:
        raise InvalidValueError("global indices must be >= 0")
    values = table(layout_words(seed, position, blocks, small=int(high) < 2**32))
    return values.reshape(-1).take((where << shift).add_(e & (per_block - 1)))


def _draw(
    seed: int,
    position: int,
    index: torch.Tensor,
    per_block: int,
    *,
    dtype: torch.dtype,
    table: _Table,
) -> torch.Tensor:
    """Values of dtype ``dtype`` for every element of ``index``, in ``index``'s shape."""
    flat = index.reshape(-1)
    count = flat.numel()
    if count == 0:
        return torch.empty(index.shape, dtype=dtype, device=index.device)
    chunk = _CPU_CHUNK if flat.device.type == "cpu" else _DEVICE_CHUNK
    if count <= chunk:
        return _element_values(seed, position, flat, per_block, table).reshape(index.shape)
    out = torch.empty(count, dtype=dtype, device=index.device)
    for start in range(0, count, chunk):
        part = flat[start : start + chunk]
        out[start : start + part.numel()] = _element_values(seed, position, part, per_block, table)
    return out.reshape(index.shape)


def _round_to(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 values rounded to ``dtype``: to float32 first, then to a half type."""
    if dtype == torch.float64:
        return values
    single = values.to(torch.float32)
    return single if dtype == torch.float32 else single.to(dtype)


def _bits53(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The 53-bit integer ``(a >> 5) * 2**26 + (b >> 6)`` of two words."""
    return (a >> 5).bitwise_left_shift_(26).bitwise_or_(b >> 6)


def uniform(
    seed: int,
    position: int,
    index: torch.Tensor,
    dtype: torch.dtype,
    *,
    low: float = 0.0,
    high: float = 1.0,
) -> torch.Tensor:
    """Uniform values in ``[low, high)`` for the elements at global flat indices ``index``.

    Parameters
    ----------
    seed : int
        The 64-bit seed, in ``[0, 2**64)``.
    position : int
        The op's position, in ``[0, 2**63)``.
    index : torch.Tensor
        Global flat element indices (integers ``>= 0``, any shape, any device).
    dtype : torch.dtype
        float32, float64, float16 or bfloat16.
    low, high : float
        Finite bounds within the dtype's range, ``low <= high``.

    Returns
    -------
    torch.Tensor
        Values of ``dtype`` on ``index``'s device, in ``index``'s shape; see the
        module's bit-to-float mapping.

    Examples
    --------
    >>> uniform(0, 0, torch.arange(3), torch.float32).tolist()
    [0.8660249710083008, 0.5133486986160278, 0.7006868720054626]
    """
    seed, position = checked_seed_position(seed, position)
    index = checked_index(index)
    low, high, lo, hi = uniform_parameters(dtype, low, high)
    if low == high:
        return torch.full(index.shape, low, dtype=dtype, device=index.device)
    width = high - low
    unit = low == 0.0 and high == 1.0

    if dtype == torch.float64:

        def table(words: Words) -> torch.Tensor:
            w0, w1, w2, w3 = words
            u = torch.stack((_bits53(w0, w1), _bits53(w2, w3)), 1).to(torch.float64)
            u.mul_(2.0**-53)
            if unit:
                return u
            return u.mul_(width).add_(low).clamp_(max=hi)

        return _draw(seed, position, index, 2, dtype=dtype, table=table)

    shift = 32 - PRECISION[dtype]
    scale = 2.0 ** -PRECISION[dtype]

    def table32(words: Words) -> torch.Tensor:
        k = torch.stack(words, 1).bitwise_right_shift_(shift)
        if unit:
            return k.to(dtype).mul_(scale)
        u = k.to(torch.float64).mul_(scale).mul_(width).add_(low)
        return _round_to(u, dtype).clamp_(lo, hi)

    return _draw(seed, position, index, 4, dtype=dtype, table=table32)


def normal(
    seed: int,
    position: int,
    index: torch.Tensor,
    dtype: torch.dtype,
    *,
    mean: float = 0.0,
    std: float = 1.0,
) -> torch.Tensor:
    """Normal values (Box-Muller within a block) for the elements at global flat indices ``index``.

    Parameters
    ----------
    seed : int
        The 64-bit seed, in ``[0, 2**64)``.
    position : int
        The op's position, in ``[0, 2**63)``.
    index : torch.Tensor
        Global flat element indices (integers ``>= 0``, any shape, any device).
    dtype : torch.dtype
        float32, float64, float16 or bfloat16.
    mean, std : float
        Finite; ``std >= 0``.

    Returns
    -------
    torch.Tensor
        Values of ``dtype`` on ``index``'s device, in ``index``'s shape; see the
        module's bit-to-float mapping.
    """
    seed, position = checked_seed_position(seed, position)
    index = checked_index(index)
    mean, std = normal_parameters(dtype, mean, std)

    def finish(z: torch.Tensor) -> torch.Tensor:
        return _round_to(z.mul_(std).add_(mean), dtype)

    if dtype == torch.float64:

        def table(words: Words) -> torch.Tensor:
            w0, w1, w2, w3 = words
            u1 = _bits53(w0, w1).add_(1).to(torch.float64).mul_(2.0**-53)
            radius = ln(u1, subnormal=False).mul_(-2.0).sqrt_()
            sin, cos = sincos_turns(_bits53(w2, w3), 53)
            return finish(torch.stack((cos, sin), 1).mul_(radius.unsqueeze(1)))

        return _draw(seed, position, index, 2, dtype=dtype, table=table)

    def table32(words: Words) -> torch.Tensor:
        w0, w1, w2, w3 = words
        columns = []
        for a, b in ((w0, w1), (w2, w3)):
            u1 = (a + 1).to(torch.float64).mul_(2.0**-32)
            radius = ln(u1, subnormal=False).mul_(-2.0).sqrt_()
            sin, cos = sincos_turns(b, 32)
            columns += [cos.mul_(radius), sin.mul_(radius)]
        return finish(torch.stack(columns, 1))

    return _draw(seed, position, index, 4, dtype=dtype, table=table32)


def bernoulli_mask(
    seed: int, position: int, index: torch.Tensor, p: float | torch.Tensor
) -> torch.Tensor:
    """A boolean mask, true with probability ``p``, for the elements at global indices ``index``.

    Parameters
    ----------
    seed : int
        The 64-bit seed, in ``[0, 2**64)``.
    position : int
        The op's position, in ``[0, 2**63)``.
    index : torch.Tensor
        Global flat element indices (integers ``>= 0``, any shape, any device).
    p : float or torch.Tensor
        The probability of true, in ``[0, 1]``: one number, or a floating tensor
        of per-element probabilities that broadcasts to ``index``'s shape.

    Returns
    -------
    torch.Tensor
        bool, on ``index``'s device, in ``index``'s shape: ``w < round(p * 2**32)``
        for each element's word ``w`` (``p = 0``: all false; ``p = 1``: all true).
    """
    seed, position = checked_seed_position(seed, position)
    index = checked_index(index)
    single = probability(p)
    if isinstance(p, torch.Tensor):
        if not probabilities_broadcast(p.shape, index.shape):
            raise InvalidValueError(
                f"probabilities of shape {tuple(p.shape)} do not broadcast to the index's "
                f"shape {tuple(index.shape)}"
            )
        words = _draw(
            seed, position, index, 4, dtype=torch.int64, table=lambda w: torch.stack(w, 1)
        )
        limits = torch.round(p.to(device=index.device, dtype=torch.float64) * 2.0**32)
        return words < limits.to(torch.int64)
    threshold = round(single * 2**32)
    return _draw(
        seed, position, index, 4, dtype=torch.bool, table=lambda w: torch.stack(w, 1) < threshold
    )


def trunc_normal(
    seed: int,
    position: int,
    index: torch.Tensor,
    dtype: torch.dtype,
    *,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
) -> torch.Tensor:
    """Normal values truncated to ``[a, b]``, by inverse CDF (one draw an element, no rejection).

    As ``torch.nn.init.trunc_normal_``: ``a`` and ``b`` are absolute bounds.
    When ``[a, b]`` lies more than about 38 standard deviations from the mean,
    float64 cannot tell the probabilities apart and the values collapse onto
    the bound nearer the mean.

    Parameters
    ----------
    seed : int
        The 64-bit seed, in ``[0, 2**64)``.
    position : int
        The op's position, in ``[0, 2**63)``.
    index : torch.Tensor
        Global flat element indices (integers ``>= 0``, any shape, any device).
    dtype : torch.dtype
        float32, float64, float16 or bfloat16.
    mean, std, a, b : float
        Finite; ``std > 0`` and ``a < b``.

    Returns
    -------
    torch.Tensor
        Values of ``dtype`` in ``[a, b]``, on ``index``'s device, in ``index``'s
        shape; see the module's bit-to-float mapping.
    """
    seed, position = checked_seed_position(seed, position)
    index = checked_index(index)
    mean, std, a, b, lo, hi = trunc_normal_parameters(dtype, mean, std, a, b)
    alpha, beta = (a - mean) / std, (b - mean) / std
    mirror = alpha + beta > 0
    if mirror:
        alpha, beta = -beta, -alpha
    base, width = phi_interval(alpha, beta)

    def finish(u: torch.Tensor) -> torch.Tensor:
        x = ndtri(u.mul_(width).add_(base))
        if mirror:
            x.neg_()
        values = x.mul_(std).add_(mean).clamp_(a, b)
        return _round_to(values, dtype).clamp_(lo, hi)

    if dtype == torch.float64:

        def table(words: Words) -> torch.Tensor:
            w0, w1, w2, w3 = words
            k = torch.stack(
                (
                    (w0 >> 6).bitwise_left_shift_(26).bitwise_or_(w1 >> 6),
                    (w2 >> 6).bitwise_left_shift_(26).bitwise_or_(w3 >> 6),
                ),
                1,
            )
            return finish(k.mul_(2).add_(1).to(torch.float64).mul_(2.0**-53))

        return _draw(seed, position, index, 2, dtype=dtype, table=table)

    def table32(words: Words) -> torch.Tensor:
        k = torch.stack(words, 1).mul_(2).add_(1)
        return finish(k.to(torch.float64).mul_(2.0**-33))

    return _draw(seed, position, index, 4, dtype=dtype, table=table32)
