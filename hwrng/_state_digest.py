"""Digests of what a generator's state will draw, never of bytes that do not change the draws.

``hwrng.verify`` compares ranks' streams by digest: two states that will draw
the same numbers must digest alike, two that will draw different numbers
must digest apart. For most generators that is a digest of the whole state
(CUDA's and Ascend's 16-byte ``(seed, offset)`` Philox state). torch's CPU
generator is the exception: its 5,056-byte state holds much that never
reaches a draw. :func:`mersenne_state_digest` digests the state that draws
rather than the stored bytes: the words the engine outputs before its next
twist, the 624 words that twist makes, and a valid cached normal sample.
Never the stored seed (``manual_seed`` keys the Mersenne Twister with its low
32 bits, and drawing never reads it), the ``seeded`` flag, the high half of
each 64-bit word slot, the low 31 bits of word 0 (the twist reads only its
top bit, and a reachable state has already output it), ``next`` before a
twist, or the legacy ``normal_x``/``normal_rho`` fields.

Each :class:`hwrng.Platform` says which digest its generators take
(:meth:`hwrng.Platform.state_digest`); the conformance suite checks it on the
backend's device.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import torch

from hwrng._exceptions import InvalidStateError

__all__ = [
    "MERSENNE_STATE_BYTES",
    "STATE_DIGEST_BYTES",
    "default_state_digest",
    "mersenne_state_digest",
    "whole_state_digest",
]

#: The size of every digest these functions return.
STATE_DIGEST_BYTES = 16

# torch's CPU generator state (aten CPUGeneratorImplState, little endian), as get_state writes it:
#   0  uint64 the_initial_seed | 8 int32 left | 12 int32 seeded | 16 uint64 next
#   24 uint64 state[624] | 5016 double normal_x, normal_y, normal_rho | 5040 int32 normal_is_valid
#   5048 float next_float_normal_sample | 5052 bool is_next_float_normal_sample_valid
# set_state keeps the low 32 bits of each state word and of next, requires 1 <= left <= 624,
# next <= 624 and seeded != 0, and caches normal_y (as the next double normal sample) only.
MERSENNE_STATE_BYTES = 5056
_WORDS = 624
_SHIFT = 397  # mt19937's M: word i of a twist mixes in word i + 397
_WORDS_AT = 24
_NORMALS_AT = _WORDS_AT + 8 * _WORDS
_UPPER, _LOWER, _MATRIX = 0x80000000, 0x7FFFFFFF, 0x9908B0DF
_PERSON = b"hwrng-draws"


def _raw(state: torch.Tensor | bytes) -> bytes:
    if isinstance(state, (bytes, bytearray)):
        return bytes(state)
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8:
        raise InvalidStateError(f"a generator state is a torch.uint8 tensor, got {state!r:.80}")
    return state.detach().cpu().contiguous().numpy().tobytes()


def _hash(*parts: bytes) -> bytes:
    hasher = hashlib.blake2b(digest_size=STATE_DIGEST_BYTES, person=_PERSON)
    for part in parts:
        hasher.update(len(part).to_bytes(8, "little"))
        hasher.update(part)
    return hasher.digest()


def whole_state_digest(state: torch.Tensor | bytes) -> bytes:
    """A 16-byte digest of every byte of a generator's state.

    What a state digests to where every byte of it determines the draws: a
    Philox generator's ``(seed, offset)`` (CUDA, Ascend NPUs), whose seed keys
    the generator with all 64 bits.
    """
    return _hash(b"whole", _raw(state))


def _mix(upper: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """mt19937's twist of word pairs: the top bit of ``upper``, the low 31 bits of ``lower``."""
    joined: np.ndarray = (upper & _UPPER) | (lower & _LOWER)
    twisted: np.ndarray = (joined >> 1) ^ (lower & 1) * np.uint32(_MATRIX)
    return twisted


def _twisted(words: np.ndarray) -> np.ndarray:
    """The 624 words the next twist makes of ``words`` (the standard mt19937 recurrence).

    In place, word ``i`` becomes word ``i + 397`` (already twisted past the end)
    XOR the mix of words ``i`` and ``i + 1`` (word 0 twisted, for the last); so
    it is computed in three blocks of independent words and the last one.
    """
    new = np.empty(_WORDS, dtype=np.uint32)
    span = _WORDS - _SHIFT  # 227
    new[:span] = words[_SHIFT:] ^ _mix(words[:span], words[1 : span + 1])
    new[span : 2 * span] = new[:span] ^ _mix(words[span : 2 * span], words[span + 1 : 2 * span + 1])
    last = _WORDS - 1
    new[2 * span : last] = new[span : last - span] ^ _mix(
        words[2 * span : last], words[2 * span + 1 :]
    )
    new[last] = new[last - span] ^ _mix(words[last:], new[:1])[0]
    return new


def mersenne_state_digest(state: torch.Tensor | bytes) -> bytes:
    """A 16-byte digest of what torch's CPU (Mersenne-Twister) generator in ``state`` draws.

    It digests the state that draws, not the stored bytes: the words the
    engine outputs before its next twist (``left - 1`` of them from word
    ``next``), the 624 words that twist makes, and each cached normal sample
    that is valid (``normal_y``, and the float sample of ``at::normal_distribution<float>``).
    Two states digest alike exactly when they output the same words and
    samples, so exactly when every draw of every op is the same. Nothing else
    enters: the stored initial seed (torch keys the Mersenne Twister with its
    low 32 bits, and drawing never reads it), the ``seeded`` flag, the high
    half of each 64-bit word slot and of ``next``, the low 31 bits of word 0
    once it has been output (the twist reads only its top bit), ``next``
    before a twist, ``normal_x`` and ``normal_rho``. So
    ``torch.manual_seed(s)`` and ``torch.manual_seed(s + 2**32)`` digest
    alike, while hwrng's own seeding, keyed by all 64 bits, digests them
    apart.

    A state torch refuses (``left`` outside ``[1, 624]``, ``next`` past 624,
    ``seeded`` 0) never draws, and one whose next words run past the last
    (``next + left > 625``: torch would read beyond its state) draws what no
    state can say; each digests by every field torch keeps.

    Raises
    ------
    InvalidStateError
        If ``state`` is not a state of torch's CPU generator layout.
    """
    raw = _raw(state)
    if len(raw) != MERSENNE_STATE_BYTES:
        raise InvalidStateError(
            f"a Mersenne-Twister state of torch's CPU generator has {MERSENNE_STATE_BYTES} "
            f"bytes, got {len(raw)}"
        )
    left, seeded, following = struct.unpack_from("<iiQ", raw, 8)
    position = following & 0xFFFFFFFF  # torch keeps the low 32 bits of next
    words = np.frombuffer(raw, dtype="<u8", count=_WORDS, offset=_WORDS_AT).astype(np.uint32)
    normal_y, double_valid = struct.unpack_from("<d8xi", raw, _NORMALS_AT + 8)
    float_sample, float_valid = struct.unpack_from("<f?", raw, _NORMALS_AT + 32)
    cached = b""
    if double_valid:
        cached += b"d" + struct.pack("<d", normal_y)
    if float_valid:
        cached += b"f" + struct.pack("<f", float_sample)
    if not (1 <= left <= _WORDS and position <= _WORDS and seeded):
        fields = struct.pack("<iiQ", left, seeded, position)
        return _hash(b"mt19937 refused", fields, words.tobytes(), cached)
    if left > 1 and position + left > _WORDS + 1:
        fields = struct.pack("<iQ", left, position)
        return _hash(b"mt19937 past the end", fields, words.tobytes(), cached)
    ahead = words[position : position + left - 1]  # output before the twist
    return _hash(b"mt19937", ahead.tobytes(), _twisted(words).tobytes(), cached)


def default_state_digest(state: torch.Tensor | bytes) -> bytes:
    """:meth:`hwrng.Platform.state_digest`'s default digest of a generator's state.

    A state of torch's CPU generator layout (:data:`MERSENNE_STATE_BYTES`, as
    every generator derived from torch's CPU generator keeps: a software
    device's, PyTorch's OpenReg) by :func:`mersenne_state_digest`, any other
    state by :func:`whole_state_digest`.
    """
    raw = _raw(state)
    if len(raw) == MERSENNE_STATE_BYTES:
        return mersenne_state_digest(raw)
    return whole_state_digest(raw)
