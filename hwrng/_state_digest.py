"""Digests of what a generator's state will draw, never of bytes that do not change the draws.

``hwrng.verify`` compares ranks' streams by digest: two states that will draw
the same numbers must digest alike, two that will draw different numbers
must digest apart. For most generators that is a digest of the whole state
(CUDA's and Ascend's 16-byte ``(seed, offset)`` Philox state). torch's CPU
generator is the exception: its state stores the 64-bit seed it was given,
but ``manual_seed`` keys the Mersenne Twister with the low 32 bits of it
(aten's ``mt19937`` ``init_with_uint32``), so ``torch.manual_seed(s)`` and
``torch.manual_seed(s + 2**32)`` hold different bytes and draw the same
numbers. :func:`mersenne_state_digest` digests only what determines the
draws: the 624 state words (each a 32-bit word kept in a 64-bit slot), the
position in them (``left``, and ``next`` unless the next draw twists every
word anyway) and the cached normal samples; never the stored seed, nor the
``seeded`` flag.

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
MERSENNE_STATE_BYTES = 5056
_WORDS = 624
_WORDS_AT = 24
_NORMALS_AT = _WORDS_AT + 8 * _WORDS
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


def mersenne_state_digest(state: torch.Tensor | bytes) -> bytes:
    """A 16-byte digest of what torch's CPU (Mersenne-Twister) generator in ``state`` draws.

    It covers the 624 state words (their low 32 bits: the engine keeps 32-bit
    words), the position in them (``left``; ``next`` only when a draw comes
    before the next twist) and the cached normal samples of ``normal_`` on
    small tensors (when valid). It leaves out the stored initial seed -- torch
    keys the Mersenne Twister with its low 32 bits, and drawing never reads it
    -- and the ``seeded`` flag. So ``torch.manual_seed(s)`` and
    ``torch.manual_seed(s + 2**32)`` digest alike (they draw alike), while
    hwrng's own seeding, keyed by all 64 bits, digests them apart.

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
    left, _seeded, following = struct.unpack_from("<iiQ", raw, 8)
    words = np.frombuffer(raw, dtype="<u8", count=_WORDS, offset=_WORDS_AT) & 0xFFFFFFFF
    # left == 1: the next draw twists all 624 words and restarts at word 0, whatever next says
    position = struct.pack("<iq", left, following if left != 1 else -1)
    normal_x, normal_y, normal_rho, double_valid = struct.unpack_from("<dddi", raw, _NORMALS_AT)
    float_sample, float_valid = struct.unpack_from("<f?", raw, _NORMALS_AT + 32)
    cached = b""
    if double_valid:
        cached += struct.pack("<ddd", normal_x, normal_y, normal_rho)
    if float_valid:
        cached += b"f" + struct.pack("<f", float_sample)
    return _hash(b"mt19937", words.astype("<u4").tobytes(), position, cached)


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
