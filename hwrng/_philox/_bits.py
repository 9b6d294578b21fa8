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
from hwrng._philox._operands import Maker, Operand, on_the_host
from hwrng._philox._parameters import checked_index, checked_seed_position, checked_word

__all__ = [
    "DOMAIN_FLAG",
    "MASK32",
    "Rounds",
    "Words",
    "block_words",
    "layout_words",
    "philox4x32_10",
]

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
#: the low 32 bits of an int64
MASK32 = _MASK32 = 0xFFFFFFFF
_ROUNDS = 10
#: the top bit of the last counter word, set in every block of the Philox ops
DOMAIN_FLAG = 0x80000000

#: the four output words of a batch of blocks
Words = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class Rounds:
    """Philox4x32-10 under one key on batches of counters, in as few tensor ops as it takes.

    The state of a batch of ``n`` blocks is one int64 tensor of shape ``(4, n)``
    whose rows are the four words, even words first (``x0, x2, x1, x3``: both
    halves of a round's work are contiguous), each in the low 32 bits of its int64; the
    high 32 bits are garbage, masked only before a product (and by whoever
    reads the words), which saves a pass per word per round. A round is six
    tensor ops on ``(2, n)`` tensors: the mask of ``(x0, x2)``, their products
    (exact modulo 2**64, as two's-complement multipliers wrap) written as
    ``(x2 * M1, x0 * M0)``, the high words of both as one shift, and two xors;
    the products' buffer then holds the new ``(x1, x3)`` as it is.

    The buffers, their rows and the constants are made once per batch size
    (on the CPU the constants are 0-dim tensors: see
    :mod:`hwrng._philox._operands`), so a round costs its six ops and nothing
    else.

    Parameters
    ----------
    k0, k1 : int
        The key, 32 bits each.
    device : torch.device
        Where the batches live (the per-round constants are made there, once).
    """

    def __init__(self, k0: int, k1: int, device: torch.device) -> None:
        #: the key of each round
        self.keys = [((k0 + r * _W0) & _MASK32, (k1 + r * _W1) & _MASK32) for r in range(_ROUNDS)]
        self.device = device
        self._keys = [
            torch.tensor([[a], [b]], dtype=torch.int64, device=device) for a, b in self.keys
        ]
        self._word = Maker(torch.int64, on_the_host(device))
        self._mask, self._m0, self._m1, self._32 = (self._word(v) for v in (_MASK32, _M0, _M1, 32))
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
        self._rows: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._counting: torch.Tensor | None = None
        self._layouts: dict[tuple[int | None, int, int], tuple[Operand, ...]] = {}

    def buffers(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A ``(4, n)`` state and a ``(2, n)`` work buffer, reused from batch to batch.

        Reusing them spares the page faults of fresh memory on every batch. The
        words a batch returns live in the state buffer: read them before the
        next batch.
        """
        if self._buffers is None or self._buffers[0].shape[1] != n:
            self._buffers = (
                torch.empty((4, n), dtype=torch.int64, device=self.device),
                torch.empty((2, n), dtype=torch.int64, device=self.device),
            )
            self._rows = {}
        return self._buffers

    def _rows_of(self, pair: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The two rows of a ``(2, n)`` view, made once per view of the buffers."""
        key = pair.data_ptr()
        rows = self._rows.get(key)
        if rows is None or rows[0].shape != pair.shape[1:]:
            rows = self._rows[key] = (pair[0], pair[1])
        return rows

    def block_range(self, start: int, stop: int) -> torch.Tensor:
        """The blocks ``start, ..., stop - 1`` as an int64 tensor (one addition, not ``arange``)."""
        count = stop - start
        if self._counting is None or self._counting.numel() < count:
            self._counting = torch.arange(count, dtype=torch.int64, device=self.device)
        return self._counting[:count] + self._word(start)

    def run(self, state: torch.Tensor, work: torch.Tensor, first: int = 0) -> torch.Tensor:
        """Rounds ``first`` to 9 on the words ``state`` (modified); returns ``state``.

        ``work`` is a ``(2, n)`` int64 buffer. The high halves of the result are
        garbage.
        """
        even, odd, products = state[:2], state[2:], work
        even0, even1 = self._rows_of(even)
        rows = {0: self._rows_of(odd), 1: self._rows_of(products)}
        mask, m0, m1, high = self._mask, self._m0, self._m1, self._32
        turn = 1
        for r in range(first, _ROUNDS):
            product1, product0 = rows[turn]
            even.bitwise_and_(mask)
            torch.mul(even0, m0, out=product0)
            torch.mul(even1, m1, out=product1)
            torch.bitwise_right_shift(products, high, out=even)
            even.bitwise_xor_(odd).bitwise_xor_(self._keys[r])
            odd, products, turn = products, odd, 1 - turn
        if (_ROUNDS - first) % 2:
            state[2:] = odd
        return state

    def layout(self, block: torch.Tensor, c1: int | None, c2: int, c3: int) -> torch.Tensor:
        """The words of the blocks ``block`` (1-D int64, ``>= 0``) with constant words ``c2, c3``.

        ``c1`` is the constant second counter word (``None``: ``block >> 32``,
        for blocks of 2**32 and beyond). With ``c1`` constant the first two
        rounds have constant operands, and cost half a round between them.
        Returns the ``(4, n)`` words, high halves garbage, in a buffer the next
        call reuses.
        """
        state, work = self.buffers(block.numel())
        x0, x2, x1, x3 = self._state_rows(state)  # the rows, even words first
        word, mask, m0, m1, high = self._word, self._mask, self._m0, self._m1, self._32
        constants = self._layouts.get((c1, c2, c3))
        if constants is None:
            constants = self._layouts[(c1, c2, c3)] = tuple(
                word(v) for v in self._layout_constants(c1, c2, c3)
            )
        # round 1: x0 is the block's low word, x2 and x3 constants (x1 too, for small blocks)
        low = block if c1 is not None else block & mask
        torch.mul(low, m0, out=x3)  # x3 = lo(x0 * M0), dirty
        torch.bitwise_right_shift(x3, high, out=x2).bitwise_xor_(constants[0])
        if c1 is None:
            torch.bitwise_right_shift(block, high, out=x0).bitwise_xor_(constants[1])
            x1.fill_(constants[2])
            return self.run(state, work, first=1)
        # round 2: x0 and x1 constant, x2 and x3 tensors
        torch.mul(x2.bitwise_and_(mask), m1, out=x1)  # x1 = lo(x2 * M1)
        torch.bitwise_right_shift(x1, high, out=x0).bitwise_xor_(constants[1])
        torch.bitwise_xor(x3, constants[2], out=x2)
        x3.fill_(constants[3])
        return self.run(state, work, first=2)

    def _layout_constants(self, c1: int | None, c2: int, c3: int) -> tuple[int, ...]:
        """The constants of :meth:`layout`'s first rounds for the constant counter words."""
        (k0, k1), (j0, j1) = self.keys[0], self.keys[1]
        q1 = c2 * _M1
        if c1 is None:
            return c3 ^ k1, (q1 >> 32) ^ k0, q1 & _MASK32
        y0, y1 = ((q1 >> 32) ^ c1 ^ k0) & _MASK32, q1 & _MASK32
        q0 = y0 * _M0
        return c3 ^ k1, y1 ^ j0, (q0 >> 32) ^ j1, q0 & _MASK32

    def _state_rows(self, state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The four rows of the state buffer, made once per buffer."""
        key = -state.data_ptr() - 1  # apart from the pairs' keys
        rows = self._rows.get(key)
        if rows is None:
            rows = self._rows[key] = tuple(state)
        return rows


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
    device = counter[0].device
    state = torch.stack([counter[i].expand(shape).reshape(-1) for i in (0, 2, 1, 3)])
    work = torch.empty((2, state.shape[1]), dtype=torch.int64, device=device)
    w0, w2, w1, w3 = (
        row.reshape(shape) for row in Rounds(k0, k1, device).run(state, work).bitwise_and_(_MASK32)
    )
    return w0, w1, w2, w3


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


def layout_words(
    seed: int,
    position: int,
    block: torch.Tensor,
    *,
    rounds: Rounds | None = None,
    largest: int | None = None,
) -> torch.Tensor:
    """The words of the 1-D blocks ``block`` in the counter layout, for checked arguments.

    Rows ``w0, w2, w1, w3`` (even words first) of a ``(4, n)`` int64 tensor.
    The high 32 bits of each int64 are garbage: mask the words before reading
    them (``& 0xFFFFFFFF``), or read only the bits you need. ``rounds`` (made
    for ``seed`` on ``block``'s device) saves remaking the round constants
    when one op computes its blocks in several batches (and the words then
    live in its buffer until the next batch); ``largest``, the largest block
    if known, spares a pass to find it.
    """
    if rounds is None:
        rounds = Rounds(seed & _MASK32, seed >> 32, block.device)
    if largest is None:
        largest = int(block.max()) if block.numel() else 0
    c2, c3 = position & _MASK32, (position >> 32) | DOMAIN_FLAG
    return rounds.layout(block, 0 if largest < 2**32 else None, c2, c3)


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
    words = layout_words(seed, position, block.reshape(-1)).bitwise_and_(_MASK32)
    w0, w2, w1, w3 = (row.reshape(block.shape) for row in words)
    return w0, w1, w2, w3
