"""The counter view of a device module's generators, with offsets or without.

PyTorch's accelerator guide makes a generator's offset optional: its
reference PrivateUse1 backend, OpenReg, derives its generator from the CPU
generator, whose ``get_offset``/``set_offset`` raise. hwrng positions such a
generator as it positions torch's CPU generator: through its Mersenne-Twister
state, with the emulated view :class:`~hwrng.MersenneCounter`. So a backend
with offset-less generators needs no code of its own, and everything hwrng
does -- seeding, tracked regions, forks, checkpoints, the invariant ops (whose
values come from hwrng's own Philox and need only a ``(seed, position)``) --
works on it, with the same numbers as anywhere.

A generator is served by the first of these that fits it:

1. its native offset API (CUDA, XPU, Ascend NPU): :class:`~hwrng.PhiloxCounter`;
2. without one, a 16-byte ``(seed, offset)`` Philox state, read and written as
   such: :class:`~hwrng.PhiloxCounter` too;
3. without one, torch's Mersenne-Twister state (OpenReg's): :class:`~hwrng.MersenneCounter`.

Any other generator is refused, with an error that says what the backend
must provide (a :class:`~hwrng.CounterView` of its own).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hwrng._counters import PhiloxCounter
from hwrng._exceptions import InvalidStateError
from hwrng._generator_table import GeneratorTable
from hwrng._host import MT_STATE_BYTES, MersenneCounter
from hwrng._platform import CounterView, Platform

__all__ = ["DeviceCounter"]


class DeviceCounter(CounterView):
    """Counter view of a device's generators: native offsets, else an emulated counter.

    Parameters
    ----------
    capturing
        As for :class:`~hwrng.PhiloxCounter`: whether the current stream is being
        captured into a graph.
    """

    @classmethod
    def for_platform(cls, platform: Platform) -> CounterView:
        """A view that asks ``platform`` whether its current stream is being captured."""
        return cls(platform.stream_capturing)

    def __init__(self, capturing: Callable[[], bool] | None = None) -> None:
        self.philox = PhiloxCounter(capturing)
        self.emulated = MersenneCounter()
        # a generator's kind never changes: remember it, for as long as the generator lives
        self._chosen: GeneratorTable[CounterView] = GeneratorTable()

    def view(self, generator: torch.Generator) -> CounterView:
        """The view that serves ``generator`` (see the module notes); or raise."""
        chosen = self._chosen.get(generator)
        if chosen is not None:
            return chosen
        if self.philox.serves(generator):
            chosen = self.philox
        elif generator.get_state().numel() == MT_STATE_BYTES:
            chosen = self.emulated
        else:
            raise InvalidStateError(
                f"the {generator.device} generator has no offset API and a "
                f"{generator.get_state().numel()}-byte state, neither the 16-byte (seed, "
                f"offset) Philox layout nor torch's {MT_STATE_BYTES}-byte Mersenne-Twister "
                "state: its platform must provide its own hwrng.CounterView"
            )
        self._chosen.set(generator, chosen)
        return chosen

    def read(self, generator: torch.Generator) -> tuple[int, int]:
        """Return the ``(seed, offset)`` the generator draws from next."""
        return self.view(generator).read(generator)

    def peek(self, generator: torch.Generator) -> tuple[int, int]:
        """Return what :meth:`read` would, changing nothing."""
        return self.view(generator).peek(generator)

    def locate(self, generator: torch.Generator) -> tuple[int, int, bool]:
        """:meth:`peek`, and whether the generator sits exactly there."""
        return self.view(generator).locate(generator)

    def write(self, generator: torch.Generator, seed: int, offset: int) -> None:
        """Position the generator at ``(seed, offset)``."""
        self.view(generator).write(generator, seed, offset)
