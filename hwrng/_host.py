"""The host generator: torch's CPU generator, and its emulated ``(seed, offset)`` view.

The host generator belongs to the core, not to the CPU backend: every
platform seeds it (``manual_seed`` seeds torch's CPU generator whatever the
accelerator), forks it, checkpoints it and hands it to DataLoader workers.
Everything in hwrng that reads or writes ``torch.default_generator`` goes
through this module.

torch's CPU generator is an mt19937 with no counter (``get_offset`` raises
"CPU Generator does not use offset"). :class:`MersenneCounter` gives it one:

* ``write(g, seed, offset)`` sets ``g`` to :func:`mersenne_state`, a state
  keyed by all 64 bits of the seed and of the offset, from which the pair is
  read back exactly (the offset is carried, masked, in two state words);
* ``torch.manual_seed(s)`` reads as ``(s, 0)``; for ``s >= 2**32``, whose torch
  seeding keeps only the low 32 bits, reading moves the generator to hwrng's
  ``(s, 0)``, keyed by all 64;
* a generator that has drawn since it was positioned reads as ``(s, a + 4)``,
  where ``a`` is the last offset hwrng wrote to that generator with seed ``s``
  (0 if none), and reading moves it there -- a position never used before,
  since positions only grow. The answer is memoised by a digest of the state,
  so a state put back (by ``fork_rng``, ``set_rng_state``, or the recomputation
  of an activation checkpoint) reads exactly as it did. Because it depends on
  the generator's history rather than its bytes, ranks seeded differently that
  ran the same program read the same offset: DTensor ops on them stay in step.

:meth:`MersenneCounter.peek` answers the same without moving the generator or
remembering anything: a look (``hwrng.verify``, a checkpoint's capture) leaves
every later read as it would have been without it.
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hwrng._counters import U64
from hwrng._exceptions import InvalidStateError
from hwrng._generator_table import GeneratorTable
from hwrng._platform import CounterView
from hwrng._validation import MAX_OFFSET

__all__ = [
    "HOST_COUNTER",
    "MersenneCounter",
    "host_counter",
    "host_generator",
    "mersenne_offset",
    "mersenne_state",
    "seed_host",
]

# torch's CPU generator state (aten CPUGeneratorImplState, 5056 bytes, little endian):
#   0  uint64 the_initial_seed | 8 int32 left | 12 int32 seeded | 16 uint64 next
#   24 uint64 state[624] (each word < 2**32) | 5016 double normal_x, normal_y, normal_rho
#   5040 int32 normal_is_valid | 5048 float next_float_normal_sample | 5052 bool valid
MT_STATE_BYTES = 5056
_MT_WORDS = 624
_KEY_START = 24
_KEY_END = _KEY_START + 8 * _MT_WORDS
_MASK32 = 0xFFFFFFFF

# left = 1 (a twist mixes every word before the first draw), seeded = 1, next = 0: the
# header torch's own seeding writes, which drawing changes for good (left/next move).
_TEMPLATE = np.zeros(MT_STATE_BYTES, dtype=np.uint8)
_TEMPLATE[8:16].view(np.int32)[:] = (1, 1)
_POSITIONED_HEADER = _TEMPLATE[8:_KEY_START].tobytes()
_POSITIONED_TAIL = _TEMPLATE[_KEY_END:].tobytes()
_KEY_DOMAIN = b"hwrng mt19937 key v2"


def _splitmix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & U64
    return z ^ (z >> 31)


def _offset_mask(seed: int) -> int:
    """A 64-bit mask, keyed by the seed, that hides the offset in state words 1 and 2."""
    return _splitmix(seed ^ 0x6F66667365742D6B)


def _key_words(seed: int, offset: int) -> np.ndarray:
    """The 624 state words (one per uint64 slot) hwrng keys ``(seed, offset)`` with.

    SHAKE-128, an extendable-output hash, turns all 64 bits of the seed and of
    the offset into 2,496 bytes in one call: distinct pairs get independent
    keys, which is all a Mersenne Twister needs (a well-mixed, non-degenerate
    start), for a few microseconds. Words 1 and 2 then carry the offset, masked
    by a key of the seed, so that the pair can be read back.
    """
    material = _KEY_DOMAIN + seed.to_bytes(8, "little") + offset.to_bytes(8, "little")
    words = np.frombuffer(hashlib.shake_128(material).digest(4 * _MT_WORDS), dtype=np.uint32)
    slots = words.astype(np.uint64)
    mask = _offset_mask(seed)
    slots[1] = (offset & _MASK32) ^ (mask & _MASK32)
    slots[2] = (offset >> 32) ^ (mask >> 32)
    return slots


@functools.lru_cache(maxsize=64)
def _torch_seeded(seed: int) -> bytes:
    """The state ``torch.manual_seed(seed)`` gives (only the low 32 bits count)."""
    scratch = torch.Generator()
    scratch.manual_seed(seed)
    return scratch.get_state().numpy().tobytes()


def _raw_state(seed: int, offset: int) -> bytes:
    """The bytes of the state :func:`mersenne_state` gives."""
    if offset == 0 and seed < 2**32:
        return _torch_seeded(seed)
    words = _key_words(seed, offset).tobytes()
    return seed.to_bytes(8, "little") + _POSITIONED_HEADER + words + _POSITIONED_TAIL


def _tensor(raw: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


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
    return _tensor(_raw_state(seed, offset))


def mersenne_offset(raw: bytes, seed: int) -> int | None:
    """The offset of a state :func:`mersenne_state` made for ``seed``, else ``None``.

    ``raw`` is the state's bytes. This reads a position from the state alone,
    without a counter's memo (a checkpoint's saved state is read this way, so
    that reading adds nothing to the memo). Drawing changes the header for
    good (``left``/``next`` move), and a cached normal sample changes the
    tail, so neither can pass; the decoded offset is then confirmed by
    rebuilding the key.
    """
    if raw[8:_KEY_START] != _POSITIONED_HEADER or raw[_KEY_END:] != _POSITIONED_TAIL:
        return None
    words = np.frombuffer(raw, dtype=np.uint64, count=3, offset=_KEY_START)
    mask = _offset_mask(seed)
    offset = (int(words[1]) ^ (mask & _MASK32)) | (int(words[2]) ^ (mask >> 32)) << 32
    if offset % 4 or offset > MAX_OFFSET or (offset == 0 and seed < 2**32):
        return None
    return offset if _raw_state(seed, offset) == raw else None


def _digest(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16, person=b"hwrng-drift").digest()


@dataclass
class _Record:
    """What a :class:`MersenneCounter` remembers of one generator."""

    #: The last ``(seed, offset, state bytes)`` it wrote, while the state is still that.
    written: tuple[int, int, bytes] | None = None
    #: The last offset it wrote for each seed, the most recent last (bounded).
    anchors: OrderedDict[int, int] = field(default_factory=OrderedDict)


class MersenneCounter(CounterView):
    """Emulated counter view for generators with torch's Mersenne-Twister state.

    See the module notes for how positions are read. One instance serves any
    number of generators; it remembers, per generator, the last position it
    wrote for each seed (in a :class:`~hwrng._generator_table.GeneratorTable`,
    which lets a generator go once nothing else holds it, on every torch) and
    a bounded memo of the positions it gave to states that have drawn.
    """

    MEMO_SIZE = 4096
    ANCHORS_PER_GENERATOR = 64

    def __init__(self) -> None:
        self._records: GeneratorTable[_Record] = GeneratorTable()
        self._memo: OrderedDict[bytes, int] = OrderedDict()

    # -- reading --------------------------------------------------------------------

    def _raw(self, generator: torch.Generator) -> bytes:
        state = generator.get_state()
        if state.numel() != MT_STATE_BYTES:
            raise InvalidStateError(
                f"expected a {MT_STATE_BYTES}-byte Mersenne-Twister state, "
                f"got {state.numel()} bytes from the {generator.device} generator"
            )
        return state.numpy().tobytes()

    def _find(self, generator: torch.Generator) -> tuple[int, int, bool, bytes | None]:
        """``(seed, offset, settled, memo key)``, changing nothing.

        The memo key is that of a state that has drawn since it was positioned
        (not settled): a read remembers the position it gives it there (see
        the module notes).
        """
        raw = self._raw(generator)
        record = self._records.get(generator)
        written = None if record is None else record.written
        if written is not None and written[2] == raw:
            return written[0], written[1], True, None
        seed = generator.initial_seed() & U64
        offset = mersenne_offset(raw, seed)
        if offset is not None:
            return seed, offset, True, None
        if raw == _torch_seeded(seed):
            return seed, 0, seed < 2**32, None
        key = _digest(raw)
        remembered = self._memo.get(key)
        if remembered is None:
            remembered = self.anchor(generator, seed) + 4
        return seed, remembered, False, key

    def _remember(self, key: bytes, offset: int) -> None:
        self._memo[key] = offset
        self._memo.move_to_end(key)
        while len(self._memo) > self.MEMO_SIZE:
            self._memo.popitem(last=False)

    def peek(self, generator: torch.Generator) -> tuple[int, int]:
        """Return what :meth:`read` would, changing nothing: not the generator, nor the memo.

        A check that only looks (``hwrng.verify``, a checkpoint's capture, a
        load's checks) must leave every later read as it would have been: a
        position it remembered would stay tied to the state while the anchor
        it came from moves on, and a later ``set_rng_state`` back to that state
        would read another position than without the look.
        """
        seed, offset, _, _ = self._find(generator)
        return seed, offset

    def locate(self, generator: torch.Generator) -> tuple[int, int, bool]:
        """Return ``(seed, offset, settled)``: ``settled`` is False where reading must move it.

        This is a read that leaves moving the generator to the caller (a
        tracked region positions it where its op draws): a position given to
        a drawn state is remembered, as :meth:`read` remembers it.
        """
        seed, offset, settled, key = self._find(generator)
        if key is not None:
            self._remember(key, offset)
        return seed, offset, settled

    def read(self, generator: torch.Generator) -> tuple[int, int]:
        """Return the ``(seed, offset)`` the generator draws from next, moving it there."""
        seed, offset, settled = self.locate(generator)
        if not settled:
            self.write(generator, seed, offset)
        return seed, offset

    # -- writing --------------------------------------------------------------------

    def write(self, generator: torch.Generator, seed: int, offset: int) -> None:
        """Put the generator in the state assigned to ``(seed, offset)``."""
        raw = _raw_state(seed, offset)
        generator.set_state(_tensor(raw))
        record = self._records.setdefault(generator, _Record)
        record.written = (seed, offset, raw)
        anchors = record.anchors
        anchors[seed] = offset
        anchors.move_to_end(seed)
        while len(anchors) > self.ANCHORS_PER_GENERATOR:
            anchors.popitem(last=False)

    def rewrite(self, generator: torch.Generator, seed: int, offset: int) -> None:
        """Put the generator at ``(seed, offset)`` without making it the anchor of ``seed``.

        A recomputation repeats positions its forward already wrote: anchoring
        them again would move the anchor back, and a later read of a drawn
        state would give a position used before.
        """
        raw = _raw_state(seed, offset)
        generator.set_state(_tensor(raw))
        self._records.setdefault(generator, _Record).written = (seed, offset, raw)

    def anchor(self, generator: torch.Generator, seed: int) -> int:
        """The last offset this view wrote to ``generator`` with ``seed`` (0 if none)."""
        record = self._records.get(generator)
        return 0 if record is None else record.anchors.get(seed, 0)

    # -- checkpoints ----------------------------------------------------------------

    def export(self, generator: torch.Generator) -> dict[str, Any]:
        """What, beside its state, makes ``generator`` read as it does: for a checkpoint."""
        record = self._records.get(generator)
        anchors = OrderedDict() if record is None else record.anchors
        raw = self._raw(generator)
        return {
            "anchors": [[seed, offset] for seed, offset in anchors.items()],
            "memo": self._memo.get(_digest(raw)),
        }

    def restore(self, generator: torch.Generator, exported: Mapping[str, Any]) -> None:
        """Undo :meth:`export` after the generator's state was put back (values pre-checked)."""
        anchors: OrderedDict[int, int] = OrderedDict(
            (int(seed), int(offset)) for seed, offset in exported["anchors"]
        )
        self._records.set(generator, _Record(anchors=anchors))
        if exported["memo"] is not None:
            self._memo[_digest(self._raw(generator))] = int(exported["memo"])


#: The counter view of torch's CPU generator: one instance, so every path agrees.
HOST_COUNTER = MersenneCounter()


def host_counter() -> MersenneCounter:
    """The counter view of torch's CPU generator that every hwrng path shares.

    A CPU backend returns it from :attr:`hwrng.Platform.counter`, so that seeding,
    forks, checkpoints and verification all read and write the host generator's
    position through the same memo.
    """
    return HOST_COUNTER


def host_generator() -> torch.Generator:
    """Torch's CPU default generator."""
    return torch.default_generator


def seed_host(seed: int) -> None:
    """Seed the host generator with all 64 bits of a checked ``seed`` (position 0)."""
    HOST_COUNTER.write(torch.default_generator, seed, 0)
