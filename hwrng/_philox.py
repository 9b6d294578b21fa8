"""Counter-based random numbers: every value a pure function of (seed, position, element index).

Long on purpose: the counter layout, the bit-to-float mappings and each
distribution's transform are one contract that the Triton kernel and the tests
restate, so it is kept in one place; the float kernels (ln, sincos, ndtri) live
in ``hwrng._philox_math``.

Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy
as 1, 2, 3", SC'11) in plain torch tensor ops, so it runs on every torch device
(CPU, CUDA, NPU, ...) and gives the same bits on all of them. A shard computes
only its own elements: the values of a shard, put together with the others,
equal the single-device tensor bit for bit, whatever the placement.

Counter layout (a contract)
---------------------------
For a 64-bit ``seed``, an op ``position`` in ``[0, 2**63)`` (its generator
offset) and a Philox block index ``block``::

    key     = (seed & 0xFFFFFFFF, seed >> 32)
    counter = (block & 0xFFFFFFFF, block >> 32,
               position & 0xFFFFFFFF, (position >> 32) | 0x80000000)

The top bit of the last counter word is a domain flag: torch's own CUDA Philox
puts small subsequence numbers there, so the two never share a block. The
rounds use the multipliers 0xD2511F53 and 0xCD9E8D57 and the key increments
0x9E3779B9 and 0xBB67AE85; all four 32-bit output words ``w0..w3`` of a block
are used.

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

Elementary functions
--------------------
The libraries' ``log``, ``sin``, ``cos`` and ``erfinv`` differ between CPU and
CUDA in the last bits, so the ones needed are built here from ``+ - * /``,
``sqrt``, comparisons and integer bit operations on float64:

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

What bit-identity across devices rests on: int64 multiplication that wraps
modulo 2**64 (the low 64 bits of the product, as every two's-complement
multiplier gives; the Philox rounds use it for the 32x32->64-bit products),
correctly rounded float64 ``+ - * / sqrt``, and round-to-nearest-even
conversions -- true of torch's CPU and CUDA kernels; a device without float64
arithmetic cannot run the float ops here.

The functions take a global index tensor, or a :class:`ShardIndices` (the
shard's per-dim index vectors), which on CUDA goes to the fused Triton kernel
of ``hwrng._philox_triton`` (same values, one pass) when Triton imports.

The fits were made with mpmath (Lawson-weighted least squares at 50-60 digits
on Chebyshev nodes; the fitting error is below 1e-16 everywhere); the errors
above are those of the float64 evaluation, measured against mpmath at 40
digits on 20,000 to 40,000 points each.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

import torch

from hwrng._exceptions import InvalidArgumentError, InvalidValueError
from hwrng._philox_math import ln, ndtri, phi_interval, sincos_turns

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

_Word = torch.Tensor | int
_Words = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
_Table = Callable[[_Words], torch.Tensor]

#: precision in bits of the 32-bit-word dtypes (float64 takes 53 bits from two words)
_PRECISION = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

# Elements per chunk. On the CPU a chunk's temporaries stay in the last-level cache (2-4x
# faster than whole-tensor passes, measured) while each op is still large enough to run on
# every core; elsewhere chunks only bound the temporaries' memory.
_CPU_CHUNK = 1 << 19
_DEVICE_CHUNK = 1 << 22


# -- Philox4x32-10 -------------------------------------------------------------------------


def _round(  # noqa: PLR0917 - the four counter words and two key words of the paper
    x0: _Word, x1: _Word, x2: _Word, x3: _Word, k0: int, k1: int
) -> tuple[_Word, _Word, _Word, _Word]:
    """One Philox round on words that may be Python ints (exact) or int64 tensors.

    An int64 product of two 32-bit values wraps modulo 2**64 (on every torch
    backend, as two's-complement hardware multiplies do); its low 32 bits are
    exact, and the arithmetic shift gives the high word up to sign extension,
    which the mask removes.
    """
    p0 = x0 * _M0
    p1 = x2 * _M1
    return (
        ((p1 >> 32) & _MASK32) ^ (x1 ^ k0),
        p1 & _MASK32,
        ((p0 >> 32) & _MASK32) ^ (x3 ^ k1),
        p0 & _MASK32,
    )


def _philox(  # noqa: PLR0917 - as _round
    x0: _Word, x1: _Word, x2: _Word, x3: _Word, k0: int, k1: int
) -> _Words:
    """Philox4x32-10 where some counter words are Python ints (constant over the batch).

    The rounds run on Python ints as long as the words allow it (the position
    words are constants, so the first two rounds do half the tensor work), then
    in place on six buffers.
    """
    done = 0
    s0, s1, s2, s3 = x0, x1, x2, x3
    while done == 0 or (
        done < _ROUNDS and not all(isinstance(w, torch.Tensor) for w in (s0, s1, s2, s3))
    ):
        if done:
            k0, k1 = (k0 + _W0) & _MASK32, (k1 + _W1) & _MASK32
        s0, s1, s2, s3 = _round(s0, s1, s2, s3, k0, k1)
        done += 1
    if not (
        isinstance(s0, torch.Tensor)
        and isinstance(s1, torch.Tensor)
        and isinstance(s2, torch.Tensor)
        and isinstance(s3, torch.Tensor)
    ):
        raise InvalidArgumentError("philox needs at least one counter word as a tensor")
    # every word is now a tensor this function allocated, so it may be overwritten
    t0, t1 = torch.empty_like(s0), torch.empty_like(s2)
    for _ in range(done, _ROUNDS):
        k0, k1 = (k0 + _W0) & _MASK32, (k1 + _W1) & _MASK32
        torch.mul(s0, _M0, out=t0)
        torch.mul(s2, _M1, out=t1)
        torch.bitwise_right_shift(t1, 32, out=s0).bitwise_and_(_MASK32).bitwise_xor_(s1)
        s0.bitwise_xor_(k0)
        torch.bitwise_right_shift(t0, 32, out=s2).bitwise_and_(_MASK32).bitwise_xor_(s3)
        s2.bitwise_xor_(k1)
        torch.bitwise_and(t1, _MASK32, out=s1)
        torch.bitwise_and(t0, _MASK32, out=s3)
    return s0, s1, s2, s3


def _check_word(name: str, value: int, bound: int) -> int:
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be an int, got a bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{name} must be an int, got {type(value).__name__}") from None
    if not 0 <= value < bound:
        raise InvalidValueError(f"{name} must lie in [0, {bound:#x}), got {value}")
    return value


def philox4x32_10(  # noqa: PLR0917 - the paper's four counter words and two key words
    c0: torch.Tensor,
    c1: torch.Tensor,
    c2: torch.Tensor,
    c3: torch.Tensor,
    k0: int,
    k1: int,
) -> _Words:
    """Philox4x32-10 of a batch of counters under one key.

    Parameters
    ----------
    c0, c1, c2, c3 : torch.Tensor
        The four 32-bit counter words, as int64 tensors of values in
        ``[0, 2**32)``, of one shape (or broadcastable) on one device.
    k0, k1 : int
        The two 32-bit key words.

    Returns
    -------
    tuple of torch.Tensor
        The four output words, int64 tensors of values in ``[0, 2**32)``.
        The inputs are not modified.

    Examples
    --------
    >>> zero = torch.zeros(1, dtype=torch.int64)
    >>> [hex(int(w)) for w in philox4x32_10(zero, zero, zero, zero, 0, 0)]
    ['0x6627e8d5', '0xe169c58d', '0xbc57ac4c', '0x9b00dbd8']
    """
    k0 = _check_word("k0", k0, 2**32)
    k1 = _check_word("k1", k1, 2**32)
    counter = []
    for name, word in (("c0", c0), ("c1", c1), ("c2", c2), ("c3", c3)):
        if not isinstance(word, torch.Tensor):
            raise InvalidArgumentError(f"{name} must be a tensor, got {type(word).__name__}")
        if word.dtype.is_floating_point or word.dtype.is_complex or word.dtype == torch.bool:
            raise InvalidArgumentError(f"{name} must be an integer tensor, got {word.dtype}")
        counter.append(word.to(torch.int64))
    shape = _broadcast_shape([w.shape for w in counter])
    x0, x1, x2, x3 = (w.expand(shape) for w in counter)
    return _philox(x0, x1, x2, x3, k0, k1)


def _broadcast_shape(shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The shape ``shapes`` broadcast to (ValueError if they do not)."""
    rank = max((len(s) for s in shapes), default=0)
    result = [1] * rank
    for shape in shapes:
        for axis, size in enumerate(shape, rank - len(shape)):
            if size != 1 and result[axis] not in (1, size):
                raise InvalidValueError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
            result[axis] = size if size != 1 else result[axis]
    return tuple(result)


def _check_seed(seed: int, position: int) -> tuple[int, int]:
    return _check_word("seed", seed, 2**64), _check_word("position", position, 2**63)


def _block_words(seed: int, position: int, block: torch.Tensor, small: bool) -> _Words:
    """The words of blocks ``block`` (int64, >= 0); ``small``: all blocks below 2**32."""
    high: _Word = 0 if small else block >> 32
    return _philox(
        block & _MASK32,
        high,
        position & _MASK32,
        (position >> 32) | _DOMAIN,
        seed & _MASK32,
        seed >> 32,
    )


def block_words(seed: int, position: int, block: torch.Tensor) -> _Words:
    """The four output words of Philox blocks in the counter layout of this module.

    Parameters
    ----------
    seed : int
        The 64-bit seed, in ``[0, 2**64)``; it is the key.
    position : int
        The op's position, in ``[0, 2**63)``.
    block : torch.Tensor
        Block indices (any integer dtype and shape, values ``>= 0``).

    Returns
    -------
    tuple of torch.Tensor
        Words 0 to 3 of each block, int64 tensors of ``block``'s shape with
        values in ``[0, 2**32)``.
    """
    seed, position = _check_seed(seed, position)
    block = _check_index(block, "block")
    if block.numel() and int(block.min()) < 0:
        raise InvalidValueError("block indices must be >= 0")
    return _block_words(seed, position, block, False)


# -- from global indices to words ----------------------------------------------------------


def _check_index(index: torch.Tensor, name: str = "index") -> torch.Tensor:
    if not isinstance(index, torch.Tensor):
        raise InvalidArgumentError(f"{name} must be a tensor, got {type(index).__name__}")
    if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
        raise InvalidArgumentError(f"{name} must be an integer tensor, got {index.dtype}")
    return index.to(torch.int64)


def _select(
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
        values = table(_block_words(seed, position, blocks, stop < 2**32))
        offset = first - (start << shift)
        return values.reshape(-1)[offset : offset + count]
    blocks, where = torch.unique_consecutive(e >> shift, return_inverse=True)
    low, high = torch.aminmax(blocks)
    if int(low) < 0:
        raise InvalidValueError("global indices must be >= 0")
    values = table(_block_words(seed, position, blocks, int(high) < 2**32))
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
        return _select(seed, position, flat, per_block, table).reshape(index.shape)
    out = torch.empty(count, dtype=dtype, device=index.device)
    for start in range(0, count, chunk):
        part = flat[start : start + chunk]
        out[start : start + part.numel()] = _select(seed, position, part, per_block, table)
    return out.reshape(index.shape)


def flat_index(dim_indices: Sequence[torch.Tensor], global_shape: Sequence[int]) -> torch.Tensor:
    """Global flat indices of a local shard, from the global positions it holds along each dim.

    Parameters
    ----------
    dim_indices : sequence of torch.Tensor
        For each dim ``k``, a 1-D integer tensor of the global positions along
        ``k`` held by the shard, in local order: one range for a plain shard,
        several concatenated ranges for a strided shard. All on one device.
    global_shape : sequence of int
        The shape of the whole (global) tensor.

    Returns
    -------
    torch.Tensor
        int64, of shape ``(len(dim_indices[0]), len(dim_indices[1]), ...)``:
        ``sum_k dim_indices[k] * global_stride[k]`` broadcast over the dims
        (row-major strides). A 0-d shape gives the 0-d index ``0``.

    Examples
    --------
    >>> flat_index([torch.tensor([1, 2]), torch.tensor([0, 3])], (3, 4)).tolist()
    [[4, 7], [8, 11]]
    """
    shape, vectors = check_dim_indices(dim_indices, global_shape)
    return _flat_index(vectors, shape)


def check_dim_indices(
    dim_indices: Sequence[torch.Tensor], global_shape: Sequence[int]
) -> tuple[list[int], list[torch.Tensor]]:
    """The global shape as ints and the index vectors, once checked to describe a shard of it."""
    shape = [_check_word("global_shape entry", int(n), 2**62) for n in global_shape]
    if len(dim_indices) != len(shape):
        raise InvalidValueError(
            f"{len(dim_indices)} index vectors for a {len(shape)}-dimensional global shape"
        )
    if math.prod(shape) >= 2**62:
        raise InvalidValueError(f"global shape {tuple(shape)} has too many elements")
    vectors = [_check_index(v, f"dim_indices[{k}]") for k, v in enumerate(dim_indices)]
    for axis, vector in enumerate(vectors):
        if vector.dim() != 1:
            raise InvalidValueError(
                f"dim_indices[{axis}] must be 1-D, got shape {tuple(vector.shape)}"
            )
        if vector.numel():
            low, high = torch.aminmax(vector)
            if int(low) < 0 or int(high) >= shape[axis]:
                raise InvalidValueError(
                    f"dim_indices[{axis}] must lie in [0, {shape[axis]}), "
                    f"got [{int(low)}, {int(high)}]"
                )
    return shape, vectors


def _flat_index(vectors: Sequence[torch.Tensor], shape: Sequence[int]) -> torch.Tensor:
    """:func:`flat_index` for vectors and a shape already checked by :func:`check_dim_indices`."""
    if not shape:
        return torch.zeros((), dtype=torch.int64)
    total: torch.Tensor | None = None
    stride = 1
    for axis in range(len(shape) - 1, -1, -1):
        view = [1] * len(shape)
        view[axis] = -1
        term = (vectors[axis] * stride).reshape(view)
        total = term if total is None else total + term
        stride *= shape[axis]
    assert total is not None
    return total.expand(*(v.numel() for v in vectors)).contiguous()


@dataclass(frozen=True, eq=False)
class ShardIndices:
    """A shard's global indices, as one global index vector per dim (see :func:`flat_index`).

    The random ops accept it wherever they accept an index tensor: the fused
    Triton kernel reads this description directly (on CUDA, where Triton
    imports); elsewhere the ops materialise :meth:`flat`.
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


def _fused(index: ShardIndices) -> ModuleType | None:
    """The fused kernel's module when it can serve ``index``'s device, else None."""
    from hwrng import _philox_triton

    return _philox_triton if _philox_triton.available(index.device) else None


# -- the distributions ---------------------------------------------------------------------


def _check_dtype(dtype: torch.dtype) -> None:
    if not isinstance(dtype, torch.dtype):
        raise InvalidArgumentError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    if dtype not in _FLOATS:
        raise InvalidArgumentError(
            f"dtype must be float32, float64, float16 or bfloat16, got {dtype}"
        )


def _check_finite(**values: float) -> dict[str, float]:
    checked = {}
    for name, given in values.items():
        if isinstance(given, bool):
            raise InvalidArgumentError(f"{name} must be a real number, got a bool")
        try:
            value = float(given)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"{name} must be a real number, got {given!r}") from None
        if not math.isfinite(value):
            raise InvalidValueError(f"{name} must be finite, got {value}")
        checked[name] = value
    return checked


def _to_dtype(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype`` as this module rounds (via float32 for the half types)."""
    t = torch.tensor(value, dtype=torch.float64)
    if dtype != torch.float64:
        t = t.to(torch.float32).to(dtype)
    return float(t)


def _step(value: float, dtype: torch.dtype, up: bool) -> float:
    """The neighbour of ``value`` (a value of ``dtype``) towards +inf (``up``) or -inf."""
    t = torch.tensor(value, dtype=dtype)
    return float(torch.nextafter(t, torch.tensor(math.inf if up else -math.inf, dtype=dtype)))


def _inside(low: float, high: float, dtype: torch.dtype, open_high: bool) -> tuple[float, float]:
    """The smallest and largest values of ``dtype`` in ``[low, high)`` (or ``[low, high]``)."""
    lo = _to_dtype(low, dtype)
    if lo < low:
        lo = _step(lo, dtype, True)
    hi = _to_dtype(high, dtype)
    if hi > high or (open_high and hi == high):
        hi = _step(hi, dtype, False)
    if lo > hi:
        raise InvalidValueError(
            f"no {dtype} value lies in [{low}, {high}{')' if open_high else ']'}"
        )
    return lo, hi


def _check_range(dtype: torch.dtype, **values: float) -> None:
    limit = torch.finfo(dtype).max
    for name, value in values.items():
        if abs(value) > limit:
            raise InvalidValueError(f"{name}={value} is outside the finite range of {dtype}")


def _broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Whether ``shape`` broadcasts to exactly ``target``."""
    if len(shape) > len(target):
        return False
    return all(n in (1, m) for n, m in zip(reversed(shape), reversed(target), strict=False))


def _round_to(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 values rounded to ``dtype``: to float32 first, then to a half type."""
    if dtype == torch.float64:
        return values
    single = values.to(torch.float32)
    return single if dtype == torch.float32 else single.to(dtype)


def _bits53(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The 53-bit integer ``(a >> 5) * 2**26 + (b >> 6)`` of two words."""
    return (a >> 5).bitwise_left_shift_(26).bitwise_or_(b >> 6)


def _uniform_parameters(
    dtype: torch.dtype, low: float, high: float
) -> tuple[float, float, float, float]:
    """``low``, ``high`` as floats and the dtype's least value >= low and greatest < high."""
    _check_dtype(dtype)
    bounds = _check_finite(low=low, high=high)
    low, high = bounds["low"], bounds["high"]
    if low > high:
        raise InvalidValueError(f"uniform needs low <= high, got low={low}, high={high}")
    _check_range(dtype, low=low, high=high)
    if low == high:
        return low, high, low, high
    if not math.isfinite(high - low):
        raise InvalidValueError(f"high - low overflows float64: low={low}, high={high}")
    lo, hi = _inside(low, high, dtype, open_high=True)
    return low, high, lo, hi


def _normal_parameters(dtype: torch.dtype, mean: float, std: float) -> tuple[float, float]:
    _check_dtype(dtype)
    params = _check_finite(mean=mean, std=std)
    if params["std"] < 0:
        raise InvalidValueError(f"normal needs std >= 0, got {params['std']}")
    return params["mean"], params["std"]


def _probability(p: float | torch.Tensor) -> float:
    """``p`` as a float, or 0.0 for a tensor of probabilities, once checked to lie in [0, 1]."""
    if isinstance(p, torch.Tensor):
        if not p.dtype.is_floating_point:
            raise InvalidArgumentError(
                f"a probability tensor must be floating point, got {p.dtype}"
            )
        if p.numel() and not bool(((p >= 0) & (p <= 1)).all()):
            raise InvalidValueError("probabilities must lie in [0, 1]")
        return 0.0
    probability = _check_finite(p=p)["p"]
    if not 0.0 <= probability <= 1.0:
        raise InvalidValueError(f"p must lie in [0, 1], got {probability}")
    return probability


def _trunc_normal_parameters(
    dtype: torch.dtype, mean: float, std: float, a: float, b: float
) -> tuple[float, float, float, float, float, float]:
    """``mean, std, a, b`` as floats and the dtype values nearest inside ``[a, b]``; or raise."""
    _check_dtype(dtype)
    params = _check_finite(mean=mean, std=std, a=a, b=b)
    mean, std, a, b = params["mean"], params["std"], params["a"], params["b"]
    if not std > 0:
        raise InvalidValueError(f"trunc_normal needs std > 0, got {std}")
    if not a < b:
        raise InvalidValueError(f"trunc_normal needs a < b, got a={a}, b={b}")
    _check_range(dtype, a=a, b=b)
    lo, hi = _inside(a, b, dtype, open_high=False)
    return mean, std, a, b, lo, hi


def check_parameters(op: str, dtype: torch.dtype, **parameters: float | torch.Tensor) -> None:
    """Raise what ``op`` (uniform, normal, bernoulli, trunc_normal) would for these parameters.

    Lets a caller refuse bad input before it moves a generator to draw.
    """
    checks: dict[str, Callable[..., object]] = {
        "uniform": _uniform_parameters,
        "normal": _normal_parameters,
        "trunc_normal": _trunc_normal_parameters,
    }
    if op == "bernoulli":
        _probability(**parameters)
    elif op in checks:
        checks[op](dtype, **parameters)
    else:
        raise InvalidArgumentError(f"unknown op {op!r}")


def drawer(
    op: str, dtype: torch.dtype, **parameters: float | torch.Tensor
) -> Callable[[int, int, Indices], torch.Tensor]:
    """Check ``op``'s parameters for ``dtype`` now; return what draws its values later.

    ``op`` is ``"uniform"``, ``"normal"``, ``"trunc_normal"`` or ``"bernoulli"``
    (whose 0/1 mask is cast to ``dtype``). The returned function takes ``(seed,
    position, index)``. Checking up front lets a caller refuse bad input before
    it moves a generator to draw.
    """
    check_parameters(op, dtype, **parameters)
    if op == "bernoulli":
        p = parameters["p"]
        return lambda seed, position, index: bernoulli_mask(seed, position, index, p).to(dtype)
    fills: dict[str, Callable[..., torch.Tensor]] = {
        "uniform": uniform,
        "normal": normal,
        "trunc_normal": trunc_normal,
    }
    fill = fills[op]
    return lambda seed, position, index: fill(seed, position, index, dtype, **parameters)


def uniform(
    seed: int,
    position: int,
    index: Indices,
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
    index : torch.Tensor or ShardIndices
        Global flat element indices (integers ``>= 0``, any shape, any device),
        or a shard's description by per-dim index vectors.
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
    if isinstance(index, ShardIndices):
        fused = _fused(index)
        if fused is not None:
            result: torch.Tensor = fused.uniform(
                seed, position, index.dims, index.shape, dtype, low=low, high=high
            )
            return result
        index = index.flat()
    seed, position = _check_seed(seed, position)
    index = _check_index(index)
    low, high, lo, hi = _uniform_parameters(dtype, low, high)
    if low == high:
        return torch.full(index.shape, low, dtype=dtype, device=index.device)
    width = high - low
    unit = low == 0.0 and high == 1.0

    if dtype == torch.float64:

        def table(words: _Words) -> torch.Tensor:
            w0, w1, w2, w3 = words
            u = torch.stack((_bits53(w0, w1), _bits53(w2, w3)), 1).to(torch.float64)
            u.mul_(2.0**-53)
            if unit:
                return u
            return u.mul_(width).add_(low).clamp_(max=hi)

        return _draw(seed, position, index, 2, dtype=dtype, table=table)

    shift = 32 - _PRECISION[dtype]
    scale = 2.0 ** -_PRECISION[dtype]

    def table32(words: _Words) -> torch.Tensor:
        k = torch.stack(words, 1).bitwise_right_shift_(shift)
        if unit:
            return k.to(dtype).mul_(scale)
        u = k.to(torch.float64).mul_(scale).mul_(width).add_(low)
        return _round_to(u, dtype).clamp_(lo, hi)

    return _draw(seed, position, index, 4, dtype=dtype, table=table32)


def normal(
    seed: int,
    position: int,
    index: Indices,
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
    index : torch.Tensor or ShardIndices
        Global flat element indices (integers ``>= 0``, any shape, any device),
        or a shard's description by per-dim index vectors.
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
    if isinstance(index, ShardIndices):
        fused = _fused(index)
        if fused is not None:
            result: torch.Tensor = fused.normal(
                seed, position, index.dims, index.shape, dtype, mean=mean, std=std
            )
            return result
        index = index.flat()
    seed, position = _check_seed(seed, position)
    index = _check_index(index)
    mean, std = _normal_parameters(dtype, mean, std)

    def finish(z: torch.Tensor) -> torch.Tensor:
        return _round_to(z.mul_(std).add_(mean), dtype)

    if dtype == torch.float64:

        def table(words: _Words) -> torch.Tensor:
            w0, w1, w2, w3 = words
            u1 = _bits53(w0, w1).add_(1).to(torch.float64).mul_(2.0**-53)
            radius = ln(u1, subnormal=False).mul_(-2.0).sqrt_()
            sin, cos = sincos_turns(_bits53(w2, w3), 53)
            return finish(torch.stack((cos, sin), 1).mul_(radius.unsqueeze(1)))

        return _draw(seed, position, index, 2, dtype=dtype, table=table)

    def table32(words: _Words) -> torch.Tensor:
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
    seed: int, position: int, index: Indices, p: float | torch.Tensor
) -> torch.Tensor:
    """A boolean mask, true with probability ``p``, for the elements at global indices ``index``.

    Parameters
    ----------
    seed : int
        The 64-bit seed, in ``[0, 2**64)``.
    position : int
        The op's position, in ``[0, 2**63)``.
    index : torch.Tensor or ShardIndices
        Global flat element indices (integers ``>= 0``, any shape, any device),
        or a shard's description by per-dim index vectors.
    p : float or torch.Tensor
        The probability of true, in ``[0, 1]``: one number, or a floating tensor
        of per-element probabilities that broadcasts to ``index``'s shape.

    Returns
    -------
    torch.Tensor
        bool, on ``index``'s device, in ``index``'s shape: ``w < round(p * 2**32)``
        for each element's word ``w`` (``p = 0``: all false; ``p = 1``: all true).
    """
    if isinstance(index, ShardIndices):
        fused = _fused(index)
        if fused is not None:
            result: torch.Tensor = fused.bernoulli_mask(seed, position, index.dims, index.shape, p)
            return result
        index = index.flat()
    seed, position = _check_seed(seed, position)
    index = _check_index(index)
    probability = _probability(p)
    if isinstance(p, torch.Tensor):
        if not _broadcasts_to(p.shape, index.shape):
            raise InvalidValueError(
                f"probabilities of shape {tuple(p.shape)} do not broadcast to the index's "
                f"shape {tuple(index.shape)}"
            )
        words = _draw(
            seed, position, index, 4, dtype=torch.int64, table=lambda w: torch.stack(w, 1)
        )
        limits = torch.round(p.to(device=index.device, dtype=torch.float64) * 2.0**32)
        return words < limits.to(torch.int64)
    threshold = round(probability * 2**32)
    return _draw(
        seed, position, index, 4, dtype=torch.bool, table=lambda w: torch.stack(w, 1) < threshold
    )


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
    index : torch.Tensor or ShardIndices
        Global flat element indices (integers ``>= 0``, any shape, any device),
        or a shard's description by per-dim index vectors.
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
    index = index.flat() if isinstance(index, ShardIndices) else index
    seed, position = _check_seed(seed, position)
    index = _check_index(index)
    mean, std, a, b, lo, hi = _trunc_normal_parameters(dtype, mean, std, a, b)
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

        def table(words: _Words) -> torch.Tensor:
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

    def table32(words: _Words) -> torch.Tensor:
        k = torch.stack(words, 1).mul_(2).add_(1)
        return finish(k.to(torch.float64).mul_(2.0**-33))

    return _draw(seed, position, index, 4, dtype=dtype, table=table32)
