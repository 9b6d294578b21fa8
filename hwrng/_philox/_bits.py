"""Philox4x32-10 in plain torch tensor ops, and the counter layout of the Philox ops.

Philox4x32-10 is that of Salmon, Moraes, Dror and Shaw, "Parallel random
numbers: as easy as 1, 2, 3" (SC'11); written in torch ops, it runs on every
torch device and gives the same bits on all of them. The rounds use the
multipliers 0xD2511F53 and 0xCD9E8D57 and the key increments 0x9E3779B9 and
0xBB67AE85; all four 32-bit output words ``w0..w3`` of a block are used.

Counter layout (a contract)
---------------------------
For a 64-bit ``seed``, an op ``position`` in ``[0, 2**63)`` (its generator
offset) and a Philox block index ``block``::

    key     = (seed & 0xFFFFFFFF, seed >> 32)
    counter = (block & 0xFFFFFFFF, block >> 32,
               position & 0xFFFFFFFF, (position >> 32) | 0x80000000)

The top bit of the last counter word is a domain flag: torch's own CUDA Philox
puts small subsequence numbers there, so the two never share a block.

Bit-identity across devices rests on int64 multiplication that wraps modulo
2**64 (the low 64 bits of the product, as every two's-complement multiplier
gives), which the rounds use for the 32x32->64-bit products.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hwrng._exceptions import InvalidArgumentError, InvalidValueError
from hwrng._philox._parameters import checked_index, checked_seed_position, checked_word

__all__ = ["DOMAIN_FLAG", "Words", "block_words", "layout_words", "philox4x32_10"]

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = 0xFFFFFFFF
_ROUNDS = 10
#: the top bit of the last counter word, set in every block of the Philox ops
DOMAIN_FLAG = 0x80000000

_Word = torch.Tensor | int
#: the four output words of a batch of blocks
Words = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


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


def _rounds(  # noqa: PLR0917 - as _round
    x0: _Word, x1: _Word, x2: _Word, x3: _Word, k0: int, k1: int
) -> Words:
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


def philox4x32_10(  # noqa: PLR0917 - the paper's four counter words and two key words
    c0: torch.Tensor,
    c1: torch.Tensor,
    c2: torch.Tensor,
    c3: torch.Tensor,
    k0: int,
    k1: int,
) -> Words:
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
    k0 = checked_word("k0", k0, 2**32)
    k1 = checked_word("k1", k1, 2**32)
    counter = []
    for name, word in (("c0", c0), ("c1", c1), ("c2", c2), ("c3", c3)):
        if not isinstance(word, torch.Tensor):
            raise InvalidArgumentError(f"{name} must be a tensor, got {type(word).__name__}")
        if word.dtype.is_floating_point or word.dtype.is_complex or word.dtype == torch.bool:
            raise InvalidArgumentError(f"{name} must be an integer tensor, got {word.dtype}")
        counter.append(word.to(torch.int64))
    shape = _broadcast_shape([w.shape for w in counter])
    x0, x1, x2, x3 = (w.expand(shape) for w in counter)
    return _rounds(x0, x1, x2, x3, k0, k1)


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


def layout_words(seed: int, position: int, block: torch.Tensor, *, small: bool) -> Words:
    """:func:`block_words` for checked arguments; ``small``: all blocks are below 2**32."""
    high: _Word = 0 if small else block >> 32
    return _rounds(
        block & _MASK32,
        high,
        position & _MASK32,
        (position >> 32) | DOMAIN_FLAG,
        seed & _MASK32,
        seed >> 32,
    )


def block_words(seed: int, position: int, block: torch.Tensor) -> Words:
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
    seed, position = checked_seed_position(seed, position)
    block = checked_index(block, "block")
    if block.numel() and int(block.min()) < 0:
        raise InvalidValueError("block indices must be >= 0")
    return layout_words(seed, position, block, small=False)
