"""The counter view of generators with a native ``(seed, offset)`` counter.

A counter view (:class:`hwrng.CounterView`, in ``_platform`` beside the
:class:`~hwrng.Platform` that hands it out) sees a generator as a seed and an
offset counted in the units of a counter-based (Philox) generator, in
multiples of 4. :class:`PhiloxCounter` serves generators with a native counter
(CUDA, NPU, XPU, ...); :class:`hwrng.MersenneCounter` (in ``_host``) emulates
the view for torch's Mersenne-Twister CPU generator.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from hwrng._exceptions import InvalidStateError, NestingError
from hwrng._platform import CounterView, Platform

__all__ = ["U64", "PhiloxCounter"]

U64 = (1 << 64) - 1


class PhiloxCounter(CounterView):
    """Counter view of a generator with a native Philox ``(seed, offset)`` counter.

    Uses ``Generator.initial_seed``, ``manual_seed``, ``get_offset`` and
    ``set_offset``, all host-side operations: on CUDA none of them synchronises
    with the device or copies state through device memory. Generators that lack
    the offset API but keep the 16-byte ``(uint64 seed, int64 offset)`` state of
    CUDA and Ascend NPU are read and written through that state instead.

    Parameters
    ----------
    capturing
        Says whether the current stream is being captured into a graph (the
        platform's :meth:`~hwrng.Platform.stream_capturing`): the offset API is
        then off limits. By default nothing is ever captured.
    """

    STATE_BYTES = 16

    @classmethod
    def for_platform(cls, platform: Platform) -> CounterView:
        """A view that asks ``platform`` whether its current stream is being captured."""
        return cls(platform.stream_capturing)

    def __init__(self, capturing: Callable[[], bool] | None = None) -> None:
        self._has_offset_api: dict[str, bool] = {}
        self._capturing = capturing if capturing is not None else _never

    def _in_capture(self, generator: torch.Generator) -> bool:
        del generator  # the platform that made this view knows its own streams
        return self._capturing()

    def _native(self, generator: torch.Generator) -> bool:
        device_type = generator.device.type
        known = self._has_offset_api.get(device_type)
        if known is not None:
            return known
        try:
            generator.get_offset()
        except AttributeError:  # no such method: it will never have one
            self._has_offset_api[device_type] = False
            return False
        except (RuntimeError, NotImplementedError):  # unsupported, or not now (graph capture)
            return False
        self._has_offset_api[device_type] = True
        return True

    def serves(self, generator: torch.Generator) -> bool:
        """Whether this view can position ``generator``: an offset API, or the 16-byte state."""
        return self._native(generator) or generator.get_state().numel() == self.STATE_BYTES

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
        if self._native(generator) and not self._in_capture(generator):
            return generator.initial_seed() & U64, int(generator.get_offset())
        words = self._layout_state(generator).numpy().view(np.uint64)
        return int(words[0]), int(words[1])

    def write(self, generator: torch.Generator, seed: int, offset: int) -> None:
        """Seed the generator with ``seed`` and move it to ``offset``.

        During CUDA graph capture the offset API is off limits and a seed
        cannot change: the 16-byte state is written with the seed it has
        (offsets are then relative to the graph, and each replay adds its
        base), and a new seed is refused with :class:`~hwrng.NestingError`.
        """
        if self._in_capture(generator):
            current = int(self._layout_state(generator).numpy().view(np.uint64)[0])
            if current != seed:
                raise NestingError(
                    f"cannot move the {generator.device} generator to seed {seed} during CUDA "
                    f"graph capture (it holds {current}; capture cannot change a seed): run "
                    "this op outside the captured region, or seed the ranks of a DTensor mesh "
                    "alike so its ops keep the generator's seed"
                )
        elif self._native(generator):
            generator.manual_seed(seed)
            if offset:
                generator.set_offset(offset)
            return
        self._layout_state(generator)
        packed = np.array([seed, offset], dtype=np.uint64).view(np.uint8)
        generator.set_state(torch.from_numpy(packed.copy()))


def _never() -> bool:
    return False
