"""Records kept per ``torch.Generator`` without weak references to the generator.

hwrng remembers things per generator: the positions a Mersenne-Twister
counter wrote (``_host``), which counter view serves a device's generator
(``_device_counter``), the claim that serialises contexts on it (``_claims``).
A ``weakref.WeakKeyDictionary`` would be the usual table, but ``torch.Generator``
can be weakly referenced only from torch 2.13 (pytorch/pytorch#180290), and
hwrng supports torch 2.10 and up. :class:`GeneratorTable` is the one mechanism,
on every torch:

* every table keys its values by the generator's ``id``, and one process-wide
  pin holds each generator that any table has a value for, strongly. While a
  value exists its generator is alive, so no other object can have that
  ``id``: a record never reaches a new generator that reuses the address of a
  dead one;
* a pinned generator that nobody else holds any more (its reference count is
  the pin's own) is unpinned by a sweep, and its values leave every table.
  Such a generator is unreachable for the program, so this is exactly what a
  weak table does, later. The sweep runs when the pins have doubled since the
  last one (and number at least :data:`SWEEP_FROM`), so it
  costs O(1) per new generator amortised, and never more than twice the
  generators alive at the last sweep, or ``SWEEP_FROM``, whichever is larger,
  are pinned.

One pin per generator, whatever the number of tables: two tables that each
held a generator would each see the other's reference, and neither could
ever let it go. A value must not refer to its generator, for the same reason.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

import torch

__all__ = ["SWEEP_FROM", "GeneratorTable", "pinned"]

V = TypeVar("V")

#: The number of pins below which no sweep runs.
SWEEP_FROM = 64


def _references(pins: dict[int, torch.Generator], key: int) -> int:
    """The reference count of a pinned generator, read the same way for every pin."""
    return sys.getrefcount(pins[key])


def _baseline() -> int:
    """What :func:`_references` reads for an object that only its pin refers to.

    The count includes the call's own temporaries, whose number depends on the
    interpreter: it is measured, not assumed.
    """
    pins: dict[int, object] = {0: object()}
    return _references(pins, 0)  # type: ignore[arg-type]


_ONLY_THE_PIN = _baseline()

_lock = threading.Lock()
#: Every generator some table holds a value for, by id: the one strong reference hwrng keeps.
_pins: dict[int, torch.Generator] = {}
#: Every live table, so that a sweep can take an unpinned generator's values out of each.
_tables: weakref.WeakSet[GeneratorTable[object]] = weakref.WeakSet()
_sweep_at = SWEEP_FROM


def _pin(generator: torch.Generator) -> None:
    """Pin ``generator`` (the caller holds ``_lock``), sweeping when the pins have doubled."""
    global _sweep_at
    key = id(generator)
    if key in _pins:
        return
    _pins[key] = generator
    if len(_pins) < _sweep_at:
        return
    unreferenced = [k for k in _pins if _references(_pins, k) <= _ONLY_THE_PIN]
    for table in list(_tables):
        for k in unreferenced:
            table._values.pop(k, None)
    for k in unreferenced:
        del _pins[k]  # the generator is freed here
    _sweep_at = max(SWEEP_FROM, 2 * len(_pins))


def pinned() -> int:
    """How many generators are pinned now (for tests and diagnostics)."""
    return len(_pins)


class GeneratorTable(Generic[V]):
    """A table of one value per live ``torch.Generator``, keyed by the generator's identity.

    See the module notes for how values live and die. Reads take no lock;
    writes take the process-wide one that the sweep takes.
    """

    def __init__(self) -> None:
        self._values: dict[int, V] = {}
        with _lock:
            _tables.add(self)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._values)

    def get(self, generator: torch.Generator) -> V | None:
        """The value recorded for ``generator``, or ``None``.

        A value found by ``id`` is the generator's own: its pin keeps the
        generator alive, so no other live object has that ``id``.
        """
        return self._values.get(id(generator))

    def set(self, generator: torch.Generator, value: V) -> None:
        """Record ``value`` for ``generator``, replacing what was recorded."""
        with _lock:
            _pin(generator)
            self._values[id(generator)] = value

    def setdefault(self, generator: torch.Generator, make: Callable[[], V]) -> V:
        """The value recorded for ``generator``, recording ``make()`` first if there is none."""
        found = self._values.get(id(generator))
        if found is not None:
            return found
        with _lock:
            found = self._values.get(id(generator))
            if found is None:
                _pin(generator)
                found = self._values[id(generator)] = make()
            return found

    def pop(self, generator: torch.Generator) -> None:
        """Forget what this table recorded for ``generator`` (nothing if nothing was)."""
        with _lock:
            self._values.pop(id(generator), None)

    def clear(self) -> None:
        """Forget what this table recorded for every generator (their pins go at a sweep)."""
        with _lock:
            self._values.clear()
