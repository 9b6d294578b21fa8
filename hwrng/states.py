"""``RNGStatesTracker``: named RNG states, as in Megatron-LM and slapo.

A model-parallel program keeps several streams on one device: the default
one (equal across tensor-parallel ranks) and e.g. ``"model-parallel-rng"``
(different on each tensor-parallel rank, for dropout inside a sharded layer).
The tracker holds each named stream's state and swaps it in for a block with
:meth:`RNGStatesTracker.fork`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import torch

from hwrng.errors import HwrngError
from hwrng.platform import DeviceLike, Platform
from hwrng.registry import resolve_platform
from hwrng.validation import apply_state, check_seed, check_state_tensor

__all__ = ["DEFAULT_STATE_NAME", "RNGStatesTracker", "TrackerError", "UnknownStateError"]

#: The name Megatron-LM uses for its tensor-parallel stream, and fork's default.
DEFAULT_STATE_NAME = "model-parallel-rng"


class TrackerError(HwrngError, ValueError):
    """A name or seed is already tracked, or a name or state is unusable."""


class UnknownStateError(HwrngError, KeyError):
    """A state name that was never added (or was reset) was asked for."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RNGStatesTracker:
    """Named RNG states of one device's default generator.

    Parameters
    ----------
    platform
        A :class:`~hwrng.Platform`, a platform name, or ``None`` for
        :func:`hwrng.get_platform`'s choice.
    device
        The device whose default generator the states belong to; by default
        the platform's current device at each call.

    Examples
    --------
    >>> import torch, hwrng
    >>> tracker = hwrng.RNGStatesTracker("cpu")
    >>> tracker.add("model-parallel-rng", 2718)
    >>> with tracker.fork():
    ...     mask = torch.rand(4) > 0.5  # drawn from the named stream
    """

    def __init__(self, platform: Platform | str | None = None, device: DeviceLike = None) -> None:
        self.platform = resolve_platform(platform)
        self.device = None if device is None else self.platform.device_index(device)
        self._states: dict[str, torch.Tensor] = {}
        self._seeds: dict[str, int | None] = {}
        self._forked: set[str] = set()

    def _generator(self) -> torch.Generator:
        return self.platform.generator(self.device)

    @property
    def names(self) -> list[str]:
        """The tracked names, in the order they were added."""
        return list(self._states)

    @property
    def forked(self) -> frozenset[str]:
        """The names whose :meth:`fork` block is running now."""
        return frozenset(self._forked)

    @property
    def seeds(self) -> dict[str, int | None]:
        """The seed each name was added with (``None`` for names from :meth:`set_states`)."""
        return dict(self._seeds)

    def add(self, name: str, seed: int) -> None:
        """Track a new state called ``name``, seeded with ``seed``.

        The device's current state is left as it was.

        Raises
        ------
        TrackerError
            If ``name`` is not a non-empty string, or ``name`` or ``seed`` is
            already tracked (two streams with one seed would draw the same numbers).
        InvalidSeedError
            If ``seed`` is not in ``[0, 2**64)``.
        """
        if not isinstance(name, str) or not name:
            raise TrackerError(f"a state name must be a non-empty string, got {name!r}")
        value = check_seed(seed)
        if name in self._states:
            raise TrackerError(f"RNG state {name!r} is already tracked")
        for other, other_seed in self._seeds.items():
            if other_seed == value:
                raise TrackerError(f"seed {value} is already used by RNG state {other!r}")
        generator = self._generator()
        saved = generator.get_state()
        try:
            self.platform.counter.write(generator, value, 0)
            state = generator.get_state()
        finally:
            generator.set_state(saved)
        self._states[name] = state
        self._seeds[name] = value

    @contextlib.contextmanager
    def fork(self, name: str = DEFAULT_STATE_NAME) -> Iterator[None]:
        """Draw from the state ``name`` inside the block.

        The device's previous state comes back afterwards, also when the block
        raises, and ``name`` keeps its advanced state for the next fork.

        Raises
        ------
        UnknownStateError
            If ``name`` was never added.
        RuntimeError
            If ``name`` is already forked (forks of one name do not nest).
        """
        if name not in self._states:
            known = ", ".join(repr(n) for n in self._states) or "none"
            raise UnknownStateError(
                f"RNG state {name!r} is not tracked (tracked: {known}); add it with "
                "tracker.add(name, seed) or seed with a preset such as "
                "hwrng.presets.megatron_manual_seed first"
            )
        if name in self._forked:
            raise RuntimeError(
                f"RNG state {name!r} is already forked; forks of one name do not nest"
            )
        generator = self._generator()
        saved = generator.get_state()
        generator.set_state(self._states[name])
        self._forked.add(name)
        try:
            yield
        finally:
            self._forked.discard(name)
            self._states[name] = generator.get_state()
            generator.set_state(saved)

    def get_states(self) -> dict[str, torch.Tensor]:
        """Return a copy of every tracked state, name to CPU ``torch.uint8`` tensor."""
        return {name: state.clone() for name, state in self._states.items()}

    def set_states(self, states: Mapping[str, torch.Tensor]) -> None:
        """Replace the tracked states with ``states`` (e.g. from a checkpoint).

        Every state is checked before any is taken; names already tracked keep
        their seeds, new names have none.

        Raises
        ------
        TrackerError
            If ``states`` is not a mapping of non-empty string names, or a name is forked.
        InvalidStateError
            If a state is not a 1-D CPU uint8 tensor of this device's state size.
        """
        if not isinstance(states, Mapping):
            raise TrackerError(
                f"states must be a mapping of name to tensor, got {type(states).__name__}"
            )
        if self._forked:
            raise TrackerError(f"cannot replace states while {sorted(self._forked)} are forked")
        generator = self._generator()
        expected = generator.get_state().numel()
        scratch = torch.Generator(device=generator.device)
        checked: dict[str, torch.Tensor] = {}
        for name, state in states.items():
            if not isinstance(name, str) or not name:
                raise TrackerError(f"a state name must be a non-empty string, got {name!r}")
            where = f"RNG state {name!r}"
            candidate = check_state_tensor(state, expected, where).clone()
            apply_state(scratch, candidate, where)  # the generator's own checks, on a scratch one
            checked[name] = candidate
        self._seeds = {name: self._seeds.get(name) for name in checked}
        self._states = checked

    def reset(self) -> None:
        """Forget every tracked state.

        Raises
        ------
        TrackerError
            If a state is forked.
        """
        if self._forked:
            raise TrackerError(f"cannot reset while {sorted(self._forked)} are forked")
        self._states.clear()
        self._seeds.clear()
