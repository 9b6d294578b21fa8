"""The RNG tracker the DTensor adapter installs: hwrng's offsets and seeds for DTensor ops.

Three paths through one region, by how the op runs:

* eager: :class:`~hwrng.OffsetTracker` positions the device's default
  generator, with the seed common to the op's mesh (:class:`_MeshSeeds`);
* under torch's ``LocalTensorMode`` (simulated ranks in one process): each
  simulated rank's saved RNG state is positioned in turn, at its own shard;
* while ``torch.compile`` traces (fake tensors): two ordered custom ops,
  ``hwrng::region_enter`` / ``hwrng::region_exit``, carry the offsets -- fixed
  ints, known at trace time -- into the graph and position the generator when
  it runs, so compiled and eager code draw the same numbers. That holds where
  the compiled op draws from the generator between the two: inductor replaces
  random ops with its own generator (unless
  ``torch._inductor.config.fallback_random``), so ``region_exit`` refuses a
  region whose generator did not move while the shard had values to draw.

On CUDA torch runs plain DTensor random ops through its ``run_dtensor_rng_op``
operator, which asks this tracker only for ``_compute_rng_offsets``; the
adapter gives that operator a CUDA kernel that draws through the same region
(see ``hwrng.dtensor._hooks``), with the seed chosen here.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import torch

from hwrng._exceptions import DTensorHookError
from hwrng._plan import Seeding
from hwrng._platform import Platform
from hwrng._seeding import current_seeding
from hwrng._sharding import ShardSpec, shard_offsets
from hwrng._tracker import OffsetTracker
from hwrng.dtensor._meshes import note as note_mesh

__all__ = ["tracker_class"]

_U64 = 2**64
_I64 = 2**63


class _MeshSeeds:
    """The seed each DTensor op draws with, from the seed plan in force.

    Cached per mesh object and plan, so an op costs a dict lookup and a compare.
    """

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Any, Seeding, int]] = {}

    def pair(self, mesh: Any) -> tuple[int, int] | None:
        """``(the plan's rank seed, the mesh's common seed)``, or ``None`` without a plan."""
        seeding = current_seeding()
        if seeding is None:
            return None  # seeded by other means: each rank draws with its own seed
        entry = self._cache.get(id(mesh))
        if entry is None or entry[0] is not mesh or entry[1] is not seeding:
            entry = (mesh, seeding, seeding.dtensor_seed(mesh))
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[id(mesh)] = entry
        return seeding.rank_seed, entry[2]

    def chooser(self, mesh: Any) -> Callable[[int], int] | None:
        """Map the generator's own seed to the seed the op draws with."""
        pair = self.pair(mesh)
        return None if pair is None else _choose(*pair)


def _choose(rank_seed: int, mesh_seed: int) -> Callable[[int], int]:
    # On the plan's stream, draw with the mesh's common seed; a generator seeded
    # otherwise since (torch.manual_seed, a named-state fork) draws with its own.
    return lambda own: mesh_seed if own == rank_seed else own


@functools.lru_cache(maxsize=4096)
def _shard_spec(spec: Any) -> ShardSpec:
    """The ShardSpec of a DTensorSpec on this rank (specs are hashable and immutable)."""
    return ShardSpec.from_dtensor_spec(spec)


def _tracing() -> bool:
    return torch._guards.detect_fake_mode() is not None


_INDUCTOR_COMPILER = os.path.join("_inductor", "compile_fx.py")


def _inductor_draws_its_own() -> bool:
    """Whether inductor compiles the graph being traced and will draw its own random numbers.

    Inductor replaces random ops with its own generator (seeds drawn once per
    graph) unless ``torch._inductor.config.fallback_random``: the op would then
    draw nothing from the generator hwrng positions. Torch says nothing to the
    traced code about the backend, so this reads whether inductor's compiler is
    on the stack (the trace runs inside it). Were it moved, ``_region_exit``
    would still refuse a region whose generator did not move at run time, but
    not one where inductor happened to draw its seeds inside the region.
    """
    config = sys.modules.get("torch._inductor.config")
    if config is None or getattr(config, "fallback_random", True):
        return False
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_INDUCTOR_COMPILER):
            return True
        frame = frame.f_back
    return False


_INDUCTOR_REFUSED = (
    "inductor replaces random ops with random numbers of its own (seeds drawn once per "
    "graph), drawn at none of hwrng's offsets and without the mesh's seed, so replicas and "
    "shards would not draw as DTensor promises; set torch._inductor.config.fallback_random "
    "= True before compiling (inductor then runs torch's random ops, in hwrng's regions), "
    "or compile with backend='aot_eager'"
)


# -- compiled code: ordered custom ops position the generator at run time -------------------


class _OpenRegions(threading.local):
    """The regions compiled code has entered and not yet left, per thread.

    ``stack`` holds the entered regions (:class:`_Open`), innermost last: the
    ``hwrng::region_enter`` operator (:func:`_region_enter`) pushes one when a
    compiled DTensor op starts and ``hwrng::region_exit`` (:func:`_region_exit`)
    pops, checks and exits it when the op ends. Nothing else reads it.
    """

    def __init__(self) -> None:
        self.stack: list[_Open] = []


_open_regions = _OpenRegions()


def _stack() -> list[_Open]:
    return _open_regions.stack


def _installed() -> Any:
    from torch.distributed.tensor import _random

    tracker = getattr(_random, "_rng_tracker", None)
    if not hasattr(tracker, "hwrng_tracker"):
        raise DTensorHookError("a compiled DTensor op ran without hwrng's adapter installed")
    return tracker


def _as_i64(value: int) -> int:
    return value - _U64 if value >= _I64 else value


def _as_u64(value: int) -> int:
    return value + _U64 if value < 0 else value


class _Open:
    """A region compiled code entered, with what ``hwrng::region_exit`` checks.

    ``entered`` is the generator's state on entry where the shard has values
    to draw, ``None`` where it has none (nothing to check).
    """

    __slots__ = ("entered", "generator", "region")

    def __init__(self, region: Any, generator: torch.Generator, draws: bool) -> None:
        self.region = region
        self.generator = generator
        self.entered = generator.get_state() if draws else None

    def drew(self) -> bool:
        """Whether the generator moved inside the region (``True`` with nothing to draw)."""
        if self.entered is None:
            return True
        return not torch.equal(self.generator.get_state(), self.entered)


@torch.library.custom_op("hwrng::region_enter", mutates_args=())
def _region_enter(  # noqa: PLR0917 - an operator's schema: compiled code passes it positionally
    start: int, end: int, rank_seed: int, mesh_seed: int, has_plan: bool, draws: bool
) -> None:
    tracker = _installed()
    choose = _choose(_as_u64(rank_seed), _as_u64(mesh_seed)) if has_plan else None
    region = tracker.hwrng_tracker.positioned_by(
        start, end, None, via_default=False, choose_seed=choose
    )
    generator = region.__enter__()
    try:
        _stack().append(_Open(region, generator, draws))
    except BaseException:
        region.__exit__(None, None, None)
        raise


@_region_enter.register_fake
def _region_enter_fake(  # noqa: PLR0917 - the operator's schema
    start: int, end: int, rank_seed: int, mesh_seed: int, has_plan: bool, draws: bool
) -> None:
    return None


@torch.library.custom_op("hwrng::region_exit", mutates_args=())
def _region_exit() -> None:
    entry = _stack().pop()
    drew = entry.drew()
    entry.region.__exit__(None, None, None)
    if not drew:
        raise DTensorHookError(
            "a compiled DTensor random op drew nothing from the generator hwrng positioned for "
            "it: the compiled code drew its numbers elsewhere (inductor draws its own unless "
            "torch._inductor.config.fallback_random is True, and with it may still schedule the "
            "draw outside hwrng's region, as on torch 2.10), so replicas and shards would not "
            "draw as DTensor promises; compile with backend='aot_eager' (the generator is left "
            "where eager code leaves it)"
        )


@_region_exit.register_fake
def _region_exit_fake() -> None:
    return None


def _ordered(name: str) -> None:
    from torch._library.effects import EffectType

    torch.library._register_effectful_op(name, EffectType.ORDERED)


# Effectful: without it the two ops return nothing and are dropped as dead code.
_ordered("hwrng::region_enter")
_ordered("hwrng::region_exit")


# -- the tracker ---------------------------------------------------------------------------


@functools.cache
def tracker_class(base: type[Any]) -> type[Any]:
    """Hwrng's subclass of torch's ``OffsetBasedRNGTracker`` (a subclass: torch checks for one)."""

    class HwrngDTensorTracker(base):  # type: ignore[misc]
        """DTensor's RNG tracker, answered by hwrng's OffsetTracker."""

        def __init__(self, platform: Platform) -> None:
            # torch's __init__ refuses CPU meshes and broadcasts rank 0's state
            # (a collective); neither is wanted, so it is not called.
            self._device = platform.device()
            self._device_handle = platform.device_handle
            self._use_distribute_region = True
            self.hwrng_platform = platform
            self.hwrng_tracker = OffsetTracker(platform)
            self.hwrng_seeds = _MeshSeeds()
            self._pending = _PendingSeedChoice()

        @contextlib.contextmanager
        def _distribute_region(
            self, spec: Any, generator: torch.Generator | None = None
        ) -> Iterator[None]:
            if not self.distribute_region_enabled:
                yield
                return
            from hwrng.dtensor._local_ranks import local_tensor_mode, simulated_region

            if generator is None:
                note_mesh(spec.mesh)  # for hwrng.verify: judge the DTensor stream per mesh
            mode = local_tensor_mode()
            if mode is not None:
                with simulated_region(mode, self.hwrng_platform, spec, generator):
                    yield
                return
            if _tracing() and generator is None:
                if _inductor_draws_its_own():
                    raise DTensorHookError(
                        f"a DTensor random op under torch.compile: {_INDUCTOR_REFUSED}"
                    )
                shard = _shard_spec(spec)
                start, end = shard_offsets(shard)
                pair = self.hwrng_seeds.pair(spec.mesh)
                rank_seed, mesh_seed = pair if pair is not None else (0, 0)
                draws = math.prod(shard.local_shape) > 0
                torch.ops.hwrng.region_enter(
                    start, end, _as_i64(rank_seed), _as_i64(mesh_seed), pair is not None, draws
                )
                try:
                    yield
                finally:
                    torch.ops.hwrng.region_exit()
                return
            # A user's generator keeps its own seed: the user chose it for every rank.
            choose = None if generator is not None else self.hwrng_seeds.chooser(spec.mesh)
            with self.hwrng_tracker.positioned(
                _shard_spec(spec),
                generator,
                via_default=generator is not None,
                choose_seed=choose,
            ):
                yield

        def _compute_rng_offsets(self, spec: Any) -> tuple[int, int]:
            # torch's CUDA operator asks for these right before it draws: leave it the
            # seed to draw with (see hwrng.dtensor._hooks._rng_op_kernel).
            note_mesh(spec.mesh)
            if not _tracing():
                self._pending.choose = self.hwrng_seeds.chooser(spec.mesh)
            return shard_offsets(_shard_spec(spec))

        def take_pending_chooser(self) -> Callable[[int], int] | None:
            """The seed choice ``_compute_rng_offsets`` left for the op now running (once)."""
            choose = self._pending.choose
            self._pending.choose = None
            return choose

        def _manual_seed(self, parallel_seed: int) -> None:
            self.hwrng_platform.manual_seed(parallel_seed)

    return HwrngDTensorTracker


class _PendingSeedChoice(threading.local):
    """The seed choice handed from ``_compute_rng_offsets`` to the CUDA kernel, per thread.

    On CUDA torch runs a plain DTensor random op through its
    ``run_dtensor_rng_op`` operator, which calls the tracker's
    ``_compute_rng_offsets(spec)`` and then, right after, hwrng's kernel for
    that operator (``hwrng.dtensor._hooks._rng_op_kernel``). ``choose`` carries
    what the kernel needs and the offsets do not say: the seed chooser of the
    op's mesh (``None``: draw with the generator's own seed).
    ``_compute_rng_offsets`` sets it (in eager code only);
    ``take_pending_chooser`` reads it for the kernel and clears it, so that
    each choice is used once, by the op it was made for.
    """

    def __init__(self) -> None:
        self.choose: Callable[[int], int] | None = None
