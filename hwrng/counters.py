"""Counter views: a generator seen as a ``(seed, offset)`` pair.

hwrng's sharded-random-op logic is written against one model of a generator:
a seed, and an offset counted in the units of a counter-based (Philox)
generator, in multiples of 4. What hwrng relies on is only this: the same
``(seed, offset)`` gives the same draws, and different offsets give different
draws. It never assumes that offsets are positions in one sequence (on Ascend
NPUs each offset selects an independent stream).

Two views are provided for backends to reuse:

* :class:`PhiloxCounter` for generators with a native counter (CUDA, NPU, XPU,
  ...). It uses the generator's own ``get_offset``/``set_offset`` so no state
  ever travels through device memory, and falls back to the 16-byte
  ``(uint64 seed, int64 offset)`` state layout where the offset API is missing.
* :class:`MersenneCounter` emulates the view for generators whose state is
  torch's Mersenne-Twister layout (torch's CPU generator), which have no counter.
"""

from __future__ import annotations

import abc
import functools
import hashlib

import numpy as np
import torch

from hwrng.errors import InvalidStateError
from hwrng.validation import MAX_OFFSET

__all__ = ["CounterView", "MersenneCounter", "PhiloxCounter", "mersenne_state"]

_U64 = (1 << 64) - 1


class CounterView(abc.ABC):
    """How a platform reads and positions a generator as ``(seed, offset)``.

    Implementations receive values already checked by the :class:`~hwrng.Platform`
    that calls them: a generator of the platform's device type, a seed in
    ``[0, 2**64)`` and an offset that is a multiple of 4 in ``[0, 2**63)``.
    """

    @abc.abstractmethod
    def read(self, generator: torch.Generator) -> tuple[int, int]:
        """Return the ``(seed, offset)`` the generator will draw from next."""

    @abc.abstractmethod
    def write(self, generator: torch.Generator, seed: int, offset: int) -> None:
        """Position the generator at ``(seed, offset)``.

        Afterwards :meth:`read` returns ``(seed, offset)`` and the next draws are
        fully determined by the pair. ``write(g, s, 0)`` must seed exactly as the
        platform's ``manual_seed(s)`` does.
        """


class PhiloxCounter(CounterView):
    """Counter view of a generator with a native Philox ``(seed, offset)`` counter.

    Uses ``Generator.initial_seed``, ``manual_seed``, ``get_offset`` and
    ``set_offset``, all host-side operations: on CUDA none of them synchronises
    with the device or copies state through device memory. Generators that lack
    the offset API but keep the 16-byte ``(uint64 seed, int64 offset)`` state of
    CUDA and Ascend NPU are read and written through that state instead.
    """

    STATE_BYTES = 16

    def __init__(self) -> None:
        self._has_offset_api: dict[str, bool] = {}

    def _native(self, generator: torch.Generator) -> bool:
        device_type = generator.device.type
        if self._has_offset_api.get(device_type):
            return True
        try:
            generator.get_offset()
        except AttributeError:  # no such method: it will never have one
            self._has_offset_api[device_type] = False
            return False
        except (RuntimeError, NotImplementedError):  # unsupported, or not now (graph capture)
            return False
        self._has_offset_api[device_type] = True
        return True

    def _layout_state(self, generator: torch.Generator) -> torch.Tensor:
        state = generator.get_state()
        if state.numel() != self.STATE_BYTES:
            raise InvalidStateError(
                f"the {generator.device} generator has no offset API and a "
                f"{state.numel()}-byte state, not the 16-byte (seed, offset) Philox layout; "
                "its platform must provide its own CounterView"
            )
        return state

    def read(self, generator: torch.Generator) -> tuple[int, int]:
        """Return the generator's ``(seed, offset)``."""
        if self._native(generator):
            return generator.initial_seed() & _U64, int(generator.get_offset())
        words = self._layout_state(generator).numpy().view(np.uint64)
        return int(words[0]), int(words[1])

    def write(self, generator: torch.Generator, seed: int, offset: int) -> None:
        """Seed the generator with ``seed`` and move it to ``offset``."""
        if self._native(generator):
            generator.manual_seed(seed)
            if offset:
                generator.set_offset(offset)
            return
        self._layout_state(generator)
        packed = np.array([seed, offset], dtype=np.uint64).view(np.uint8)
        generator.set_state(torch.from_numpy(packed.copy()))


# --- Mersenne-Twister emulation -------------------------------------------------------

# torch's CPU generator state (aten CPUGeneratorImplState, 5056 bytes, little endian):
#   0  uint64 the_initial_seed | 8 int32 left | 12 int32 seeded | 16 uint64 next
#   24 uint64 state[624] (each word < 2**32) | 5016 double normal_x, normal_y, normal_rho
#   5040 int32 normal_is_valid | 5048 float next_float_normal_sample | 5052 bool valid
_MT_WORDS = 624
_MT_STATE_BYTES = 5056
_MT_KEY_START = 24
_MT_KEY_END = _MT_KEY_START + 8 * _MT_WORDS
_MASK32 = 0xFFFFFFFF
_DRIFT_SPAN = 2**59  # drifted states read as offsets 4 * [0, 2**59): far below 2**63

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_SHIFTS = tuple(np.uint64(shift) for shift in (30, 27, 32))
_WORD_STEPS = np.arange(1, _MT_WORDS + 1, dtype=np.uint64) * _GOLDEN
_TEMPLATE = np.zeros(_MT_STATE_BYTES, dtype=np.uint8)
_TEMPLATE[8:16].view(np.int32)[:] = (1, 1)  # left = 1 (twist before the first draw), seeded
_POSITIONED_HEADER = _TEMPLATE[8:24].tobytes()
_POSITIONED_TAIL = _TEMPLATE[_MT_KEY_END:].tobytes()


def _splitmix_finalise(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
    return z ^ (z >> 31)


def _offset_mask(seed: int) -> int:
    """A 64-bit mask, keyed by the seed, that hides the offset in state words 1 and 2."""
    return _splitmix_finalise(seed ^ 0x6F66667365742D6B)


def _fill_keyed_words(words: np.ndarray, seed: int, offset: int) -> None:
    """Fill ``words`` (624 uint64) with 32-bit words keyed by all 64 bits of seed and offset.

    SplitMix64 over a counter whose start mixes both inputs (the last
    xor-shift is left out: it changes only the lowest of the 32 bits kept).
    The Mersenne Twister only needs a non-degenerate start, and this costs a
    few microseconds where ``numpy.random.SeedSequence`` costs ~75; it works
    in place to keep NumPy's per-call overhead down.
    """
    base = _splitmix_finalise(seed ^ 0x68776E672D6370) ^ _splitmix_finalise(
        (offset + 0x243F6A8885A308D3) & _U64
    )
    shift30, shift27, shift32 = _SHIFTS
    scratch = np.empty(_MT_WORDS, dtype=np.uint64)
    np.add(_WORD_STEPS, np.uint64(base), out=words)
    np.right_shift(words, shift30, out=scratch)
    np.bitwise_xor(words, scratch, out=words)
    np.multiply(words, _MIX1, out=words)
    np.right_shift(words, shift27, out=scratch)
    np.bitwise_xor(words, scratch, out=words)
    np.multiply(words, _MIX2, out=words)
    np.right_shift(words, shift32, out=words)


def mersenne_state(seed: int, offset: int) -> torch.Tensor:
    """Return the torch CPU generator state that hwrng assigns to ``(seed, offset)``.

    ``(seed, 0)`` with ``seed < 2**32`` is exactly ``torch.manual_seed(seed)``.
    torch's own seeding keeps only the low 32 bits of the seed (so
    ``torch.manual_seed(1)`` and ``torch.manual_seed(1 + 2**32)`` draw the same
    numbers); every other pair gets a Mersenne-Twister key derived from all 64
    bits of the seed and of the offset, so distinct pairs give distinct streams.
    State words 1 and 2 carry the offset, masked by a key of the seed, so that
    the pair can be read back from the state alone.
    """
    if offset == 0 and seed < 2**32:
        return torch.frombuffer(bytearray(_torch_seeded(seed)), dtype=torch.uint8)
    raw = _TEMPLATE.copy()
    raw[0:8].view(np.uint64)[0] = seed
    words = raw[_MT_KEY_START:_MT_KEY_END].view(np.uint64)
    _fill_keyed_words(words, seed, offset)
    mask = _offset_mask(seed)
    words[1] = (offset & _MASK32) ^ (mask & _MASK32)
    words[2] = (offset >> 32) ^ (mask >> 32)
    return torch.from_numpy(raw)


def _decode(raw: bytes, seed: int) -> int | None:
    """The offset of a state :func:`mersenne_state` made for ``seed``, else ``None``."""
    if raw[8:24] != _POSITIONED_HEADER or raw[_MT_KEY_END:] != _POSITIONED_TAIL:
        return None  # it has drawn (or holds a cached normal): not a positioned state
    words = np.frombuffer(raw, dtype=np.uint64, count=3, offset=_MT_KEY_START)
    mask = _offset_mask(seed)
    offset = (int(words[1]) ^ (mask & _MASK32)) | (int(words[2]) ^ (mask >> 32)) << 32
    if offset % 4 or offset > MAX_OFFSET or (offset == 0 and seed < 2**32):
        return None
    return offset if mersenne_state(seed, offset).numpy().tobytes() == raw else None


@functools.lru_cache(maxsize=64)
def _torch_seeded(seed: int) -> bytes:
    """The state ``torch.manual_seed(seed)`` gives (only the low 32 bits count)."""
    scratch = torch.Generator()
    scratch.manual_seed(seed)
    return scratch.get_state().numpy().tobytes()


class MersenneCounter(CounterView):
    """Emulated counter view for generators with torch's Mersenne-Twister state.

    torch's CPU generator is an mt19937 with no counter (``get_offset`` raises
    "CPU Generator does not use offset"). hwrng gives it one, as a pure
    function of the generator's state -- so replicas in the same state read the
    same pair, and a state put back by ``fork_rng``, ``set_rng_state`` or
    activation-checkpoint recomputation reads as it did before:

    * ``write(g, seed, offset)`` sets ``g`` to :func:`mersenne_state`, a state
      determined by the pair, from which the pair is read back exactly;
    * ``torch.manual_seed(s)`` reads as ``(s, 0)``; for ``s >= 2**32``, whose
      torch seeding keeps only the low 32 bits, reading moves the generator to
      hwrng's ``(s, 0)``, keyed by all 64;
    * a generator that has drawn since it was positioned reads as ``(s, o)``
      with ``o`` a multiple of 4 hashed from its whole state (BLAKE2b), a
      position no op has used in all likelihood (``o`` is drawn from 2**59
      values), and reading moves it to that position, so that -- as on a
      Philox generator -- the pair read determines what is drawn next.
    """

    def __init__(self) -> None:
        self._last: tuple[int, int, bytes] | None = None  # a cache: the last position written

    def read(self, generator: torch.Generator) -> tuple[int, int]:
        """Return the ``(seed, offset)`` the generator draws from next (see the class notes)."""
        state = generator.get_state()
        if state.numel() != _MT_STATE_BYTES:
            raise InvalidStateError(
                f"expected a {_MT_STATE_BYTES}-byte Mersenne-Twister state, "
                f"got {state.numel()} bytes from the {generator.device} generator"
            )
        raw = state.numpy().tobytes()
        last = self._last
        if last is not None and last[2] == raw:
            return last[0], last[1]
        seed = generator.initial_seed() & _U64
        offset = _decode(raw, seed)
        if offset is not None:
            return seed, offset
        if raw == _torch_seeded(seed):
            if seed >= 2**32:
                self.write(generator, seed, 0)
            return seed, 0
        digest = hashlib.blake2b(raw, digest_size=8, person=b"hwrng-drift").digest()
        offset = 4 * (int.from_bytes(digest, "little") % _DRIFT_SPAN)
        self.write(generator, seed, offset)
        return seed, offset

    def write(self, generator: torch.Generator, seed: int, offset: int) -> None:
        """Put the generator in the state assigned to ``(seed, offset)``."""
        state = mersenne_state(seed, offset)
        generator.set_state(state)
        self._last = (seed, offset, state.numpy().tobytes())
