"""``RNGStatesTracker``: named RNG states, as in Megatron-LM and slapo.

A model-parallel program keeps several streams on one device: the default
one (equal across tensor-parallel ranks) and e.g. ``"model-parallel-rng"``
(different on each tensor-parallel rank, for dropout inside a sharded layer).
The tracker holds each named stream's state and swaps it in for a block with
:meth:`RNGStatesTracker.fork`.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections.abc import Iterator, Mapping

import torch

from hwrng import _recompute as recompute
from hwrng._claims import claim
from hwrng._exceptions import NestingError, TrackerError, UnknownStateError
from hwrng._platform import DeviceLike, Platform
from hwrng._registry import platform_in_force
from hwrng._validation import apply_state, check_seed, check_state_tensor

__all__ = [
    "DEFAULT_STATE_NAME",
    "GRAPH_STATES_PER_CAPTURE_TORCH",
    "RNGStatesTracker",
    "graph_states_registered_per_capture",
    "live_trackers",
]

#: The name Megatron-LM uses for its tensor-parallel stream, and fork's default.
DEFAULT_STATE_NAME = "model-parallel-rng"

_names_lock = threading.Lock()
_live: weakref.WeakValueDictionary[str, RNGStatesTracker] = weakref.WeakValueDictionary()
_numbers = itertools.count(1)


#: The first torch whose CUDA graph captures register the generator states they use
#: themselves, ``CUDAGraph.register_generator_state`` becoming a deprecated no-op.
GRAPH_STATES_PER_CAPTURE_TORCH = (2, 14)


def graph_states_registered_per_capture() -> bool:
    """``True`` on a torch (>= 2.14) whose CUDA graph captures register generator states.

    The one private behaviour hwrng judges by torch's release: pytorch/pytorch#176753
    changed C++ alone, and its only sign visible from Python is the deprecation warning
    ``register_generator_state`` prints through torch's C++ handler on every call (which
    Python's filters cannot silence) -- the call this gate exists to avoid. Where
    registration is needed, :meth:`RNGStatesTracker.register_graph_states` still checks
    that the graph has the method.
    """
    release = torch.__version__.split("+")[0].split(".")
    try:
        found = (int(release[0]), int(release[1]))
    except (IndexError, ValueError):
        return True  # an unparsable (future, local) build: never call the deprecated API
    return found >= GRAPH_STATES_PER_CAPTURE_TORCH


def live_trackers() -> dict[str, RNGStatesTracker]:
    """Every tracker alive in this process, by name (what checkpoints save)."""
    with _names_lock:
        return dict(sorted(_live.items()))


class RNGStatesTracker:
    """Named RNG states of one device's default generator.

    Parameters
    ----------
    platform
        A :class:`~hwrng.Platform`, a platform name, or ``None`` for
        the platform in force (the seed plan's, else :func:`hwrng.get_platform`'s choice).
    device
        The device whose default generator the states belong to; by default
        the platform's current device at each call.
    name
        The tracker's name, under which :func:`hwrng.state_dict` saves its
        states and :func:`hwrng.load_state_dict` finds it again; by default
        ``"tracker-N"`` in order of creation. Name trackers whose creation
        order may change between runs. Two live trackers cannot share a name.

    Examples
    --------
    >>> import torch, hwrng
    >>> tracker = hwrng.RNGStatesTracker("cpu")
    >>> tracker.add("model-parallel-rng", 2718)
    >>> with tracker.fork():
    ...     mask = torch.rand(4) > 0.5  # drawn from the named stream
    """

    def __init__(
        self,
        platform: Platform | str | None = None,
        device: DeviceLike = None,
        *,
        name: str | None = None,
    ) -> None:
        if name is not None and (not isinstance(name, str) or not name):
            raise TrackerError(f"a tracker name must be a non-empty string, got {name!r}")
        self.platform = platform_in_force(platform)
        self.device = None if device is None else self.platform.device_index(device)
        self._states: dict[str, object] = {}
        self._seeds: dict[str, int] = {}
        self._forked: set[str] = set()
        with _names_lock:
            chosen = name if name is not None else f"tracker-{next(_numbers)}"
            if chosen in _live:
                raise TrackerError(f"an RNGStatesTracker named {chosen!r} already exists")
            _live[chosen] = self
        self.name = chosen

    def __repr__(self) -> str:
        return f"<RNGStatesTracker {self.name!r} on {self.platform.name}: {self.names}>"

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
    def seeds(self) -> dict[str, int]:
        """The seed of each tracked state (read from the state itself after :meth:`set_states`)."""
        return dict(self._seeds)

    def _refuse_seed_clash(self, seeds: Mapping[str, int]) -> None:
        owners: dict[int, str] = {}
        for state_name, seed in seeds.items():
            if seed in owners:
                raise TrackerError(
                    f"seed {seed} is already used by RNG state {owners[seed]!r}; "
                    f"{state_name!r} would draw the same numbers"
                )
            owners[seed] = state_name

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
        self._refuse_seed_clash({**self._seeds, name: value})
        generator = self._generator()
        with claim(generator):
            self._states[name] = self.platform.detached_state(generator, value)
        self._seeds[name] = value

    @contextlib.contextmanager
    def fork(self, name: str = DEFAULT_STATE_NAME) -> Iterator[None]:
        """Draw from the state ``name`` inside the block.

        The device's previous state comes back afterwards, also when the block
        raises, and ``name`` keeps its advanced state for the next fork. Forks
        on one device are serialised across threads.

        Under activation checkpointing (``torch.utils.checkpoint`` in every
        flavour) a fork in the checkpointed forward records the state it starts
        from, and the same fork in the recomputation starts there again and
        leaves ``name`` as the forward left it: the recomputation redraws the
        forward's numbers and advances nothing twice (see "Activation
        checkpointing" in the concepts page).

        Raises
        ------
        UnknownStateError
            If ``name`` was never added.
        NestingError
            If ``name`` is already forked (forks of one name do not nest).
        RecomputationError
            In a recomputation whose forward did not fork ``name`` at this point.
        """
        if name not in self._states:
            known = ", ".join(repr(n) for n in self._states) or "none"
            raise UnknownStateError(
                f"RNG state {name!r} is not tracked (tracked: {known}); add it with "
                "tracker.add(name, seed) or seed with a preset such as "
                "hwrng.presets.megatron_manual_seed first"
            )
        generator = self._generator()
        platform = self.platform
        with claim(generator):
            if name in self._forked:
                raise NestingError(
                    f"RNG state {name!r} is already forked; forks of one name do not nest"
                )
            where = recompute.site()
            if where is not None and where.replaying:
                with recompute.quietly():
                    start = where.replay("named state", (self.name, name))
                    replayed = platform.state_from_tensor(generator, start)
                token = platform.swap_in(generator, replayed)
                self._forked.add(name)
                try:
                    yield
                finally:  # the named state keeps where its forward left it
                    self._forked.discard(name)
                    platform.swap_out(generator, token)
                return
            if where is not None:
                with recompute.quietly():
                    where.record(
                        "named state", (self.name, name), platform.state_tensor(self._states[name])
                    )
            token = platform.swap_in(generator, self._states[name])
            self._forked.add(name)
            try:
                yield
            finally:
                self._forked.discard(name)
                self._states[name] = platform.swap_out(generator, token)

    def graph_states(self) -> list[torch.Generator]:
        """The named states a CUDA graph captures forks of, on graph-safe platforms.

        What to do with them depends on torch:

        * torch < 2.14: a graph must know each before capture;
          :meth:`register_graph_states` calls ``graph.register_generator_state``
          for each.
        * torch >= 2.14: nothing. A capture registers every generator state it
          draws from itself (lazily, per capture), and
          ``register_generator_state`` is a deprecated no-op that warns on each
          call; :meth:`register_graph_states` then registers nothing.

        Empty on platforms whose named states are copied tensors (no
        ``"graph_safe_states"`` capability): nothing to register on any torch.
        """
        return [state for state in self._states.values() if isinstance(state, torch.Generator)]

    def register_graph_states(self, graph: object) -> list[torch.Generator]:
        """Make ``graph`` (a ``torch.cuda.CUDAGraph``) know the named states, as this torch needs.

        Call it before capturing forks. On torch < 2.14 it registers each of
        :meth:`graph_states` with ``graph.register_generator_state``; on torch
        >= 2.14, where capture registers generator states itself and that call
        is deprecated, it calls nothing.

        Returns
        -------
        list of torch.Generator
            The states it registered (empty on torch >= 2.14).

        Raises
        ------
        TrackerError
            If registration is needed and ``graph`` has no
            ``register_generator_state``. Nothing is registered then.
        """
        if graph_states_registered_per_capture():
            return []
        states = self.graph_states()
        register = getattr(graph, "register_generator_state", None)
        if states and not callable(register):
            raise TrackerError(
                f"expected a torch.cuda.CUDAGraph, got {type(graph).__name__} without "
                "register_generator_state"
            )
        for state in states:
            register(state)  # type: ignore[misc]
        return states

    def get_states(self) -> dict[str, torch.Tensor]:
        """Return a copy of every tracked state, name to CPU ``torch.uint8`` tensor."""
        return {name: self.platform.state_tensor(state) for name, state in self._states.items()}

    def set_states(self, states: Mapping[str, torch.Tensor]) -> None:
        """Replace the tracked states with ``states`` (e.g. from a checkpoint).

        Every state is checked before any is taken. An empty tracker takes any
        names; a tracker that holds states must be given exactly its names
        (call :meth:`reset` first to replace the set). Each state's seed is read
        from the state itself, so duplicates stay refused afterwards.

        Raises
        ------
        TrackerError
            If ``states`` is not a mapping of non-empty string names, leaves out
            or adds names to a non-empty tracker, holds two states of one seed,
            or a name is forked.
        InvalidStateError
            If a state is not a 1-D CPU uint8 tensor of this device's state size,
            or is refused by the generator.
        """
        checked, seeds = self.check_states(states)
        self._seeds = seeds
        self._states = {
            name: self.platform.state_from_tensor(self._generator(), tensor)
            for name, tensor in checked.items()
        }

    def check_states(
        self, states: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
        """Check what :meth:`set_states` would take, changing nothing; return copies and seeds."""
        if not isinstance(states, Mapping):
            raise TrackerError(
                f"states must be a mapping of name to tensor, got {type(states).__name__}"
            )
        if self._forked:
            raise TrackerError(f"cannot replace states while {sorted(self._forked)} are forked")
        for name in states:
            if not isinstance(name, str) or not name:
                raise TrackerError(f"a state name must be a non-empty string, got {name!r}")
        if self._states and set(states) != set(self._states):
            missing = sorted(set(self._states) - set(states))
            extra = sorted(set(states) - set(self._states))
            parts = [f"leaves out {missing}" if missing else "", f"adds {extra}" if extra else ""]
            raise TrackerError(
                f"set_states {' and '.join(p for p in parts if p)} of tracker {self.name!r} "
                f"(tracking {self.names}); call reset() first to replace the set of states"
            )
        generator = self._generator()
        expected = generator.get_state().numel()
        scratch = torch.Generator(device=generator.device)
        checked: dict[str, torch.Tensor] = {}
        seeds: dict[str, int] = {}
        for name, state in states.items():
            where = f"RNG state {name!r}"
            candidate = check_state_tensor(state, expected, where).clone()
            apply_state(scratch, candidate, where)  # the generator's own checks, on a scratch one
            checked[name] = candidate
            seeds[name] = scratch.initial_seed()
        self._refuse_seed_clash(seeds)
        return checked, seeds

    def generation_states(self, generation: int) -> dict[str, torch.Tensor]:
        """Every tracked state re-keyed for a resume generation, as :meth:`set_states` takes.

        State ``name`` added with seed ``s`` becomes the start of the stream of
        :func:`~hwrng._plan.generation_seed` ``(s, generation)``: a resume that
        cannot restore a state re-derives one that never repeats its draws,
        while states that shared a seed still share one. Nothing changes.
        """
        from hwrng._plan import generation_seed

        generator = self._generator()
        with claim(generator):
            return {
                name: self.platform.state_tensor(
                    self.platform.detached_state(generator, generation_seed(seed, generation))
                )
                for name, seed in self._seeds.items()
            }

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
