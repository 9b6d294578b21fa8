"""Route DTensor's random ops through hwrng's :class:`~hwrng.OffsetTracker`.

``torch.distributed.tensor`` runs a random op (``uniform_``, ``normal_``,
``nn.init.*``, dropout, ``torch.distributed.tensor.rand``) inside its RNG
tracker, ``torch.distributed.tensor._random._rng_tracker``. torch's own tracker
refuses CPU meshes -- and without one every shard of a DTensor on a CPU mesh
gets the same numbers -- and its offsets collide for tiny or multiply-sharded
shards (see :mod:`hwrng._sharding`). :func:`install` puts hwrng's tracker in
its place, on any platform.

This hooks a private part of torch. :func:`install` checks that the hook has
the shape this adapter was written for and raises
:class:`~hwrng.DTensorHookError` naming the torch version where it does not.
On CUDA, torch 2.10+ runs DTensor random ops through a traceable operator that
asks the tracker only for its offsets; the adapter answers with hwrng's.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch

from hwrng._exceptions import DTensorHookError
from hwrng._plan import Seeding
from hwrng._platform import Platform
from hwrng._registry import resolve_platform
from hwrng._seeding import current_seeding
from hwrng._sharding import ShardSpec, shard_offsets
from hwrng._tracker import OffsetTracker

__all__ = ["MIN_TORCH", "install", "installed_platform", "uninstall"]

#: The oldest torch whose DTensor RNG hook this adapter is written for: 2.9 is the first
#: release whose ``_distribute_region`` takes a user's generator (pytorch/pytorch#159933).
MIN_TORCH = (2, 9)

_NOT_INSTALLED = object()
_previous: Any = _NOT_INSTALLED


def _torch_version() -> tuple[int, int]:
    release = torch.__version__.split("+")[0].split(".")
    try:
        return int(release[0]), int(release[1])
    except (IndexError, ValueError):
        return (0, 0)


def _hook_module() -> ModuleType:
    """Import torch's DTensor RNG module and check it has the hook we replace."""
    found = torch.__version__
    if _torch_version() < MIN_TORCH:
        raise DTensorHookError(
            f"hwrng's DTensor adapter needs torch >= {'.'.join(map(str, MIN_TORCH))}, found {found}"
        )
    try:
        from torch.distributed.tensor import _random
    except ImportError as error:
        raise DTensorHookError(
            f"torch {found} has no torch.distributed.tensor._random: {error}"
        ) from error
    problems = [
        f"no {name}"
        for name in ("_rng_tracker", "OffsetBasedRNGTracker")
        if not hasattr(_random, name)
    ]
    base = getattr(_random, "OffsetBasedRNGTracker", None)
    if base is not None:
        region = getattr(base, "_distribute_region", None)
        if region is None:
            problems.append("no OffsetBasedRNGTracker._distribute_region")
        else:
            params = list(inspect.signature(region).parameters)
            if params[:3] != ["self", "spec", "generator"]:
                problems.append(f"_distribute_region takes {params}, not (self, spec, generator)")
        if not isinstance(getattr(base, "distribute_region_enabled", None), property):
            problems.append("no distribute_region_enabled property")
    if problems:
        raise DTensorHookError(
            f"torch {found}'s DTensor RNG hook differs from the one hwrng's adapter fits: "
            + "; ".join(problems)
        )
    return _random


class _MeshSeeds:
    """The seed each DTensor op draws with, from the seed plan in force (see module notes).

    Cached per mesh object and plan, so an op costs a dict lookup and a compare.
    """

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Any, Seeding, int]] = {}

    def chooser(self, mesh: Any) -> Callable[[int], int] | None:
        seeding = current_seeding()
        if seeding is None:
            return None  # seeded by other means: each rank draws with its own seed
        entry = self._cache.get(id(mesh))
        if entry is None or entry[0] is not mesh or entry[1] is not seeding:
            entry = (mesh, seeding, seeding.dtensor_seed(mesh))
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[id(mesh)] = entry
        rank_seed, mesh_seed = seeding.rank_seed, entry[2]
        # On the plan's stream, draw with the mesh's common seed; a generator seeded
        # otherwise since (torch.manual_seed, a named-state fork) draws with its own.
        return lambda own: mesh_seed if own == rank_seed else own


@functools.lru_cache(maxsize=4096)
def _shard_spec(spec: Any) -> ShardSpec:
    """The ShardSpec of a DTensorSpec on this rank (specs are hashable and immutable)."""
    return ShardSpec.from_dtensor_spec(spec)


@functools.cache
def _tracker_class(base: type[Any]) -> type[Any]:
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

        @contextlib.contextmanager
        def _distribute_region(
            self, spec: Any, generator: torch.Generator | None = None
        ) -> Iterator[None]:
            if not self.distribute_region_enabled:
                yield
                return
            shard = _shard_spec(spec)
            # A user's generator keeps its own seed: the user chose it for every rank.
            choose = None if generator is not None else self.hwrng_seeds.chooser(spec.mesh)
            with self.hwrng_tracker.positioned(shard, generator, generator is not None, choose):
                yield

        def _compute_rng_offsets(self, spec: Any) -> tuple[int, int]:
            return shard_offsets(_shard_spec(spec))

        def _manual_seed(self, parallel_seed: int) -> None:
            self.hwrng_platform.manual_seed(parallel_seed)

    return HwrngDTensorTracker


def install(platform: Platform | str | None = None) -> None:
    """Make DTensor random ops use hwrng's offsets on ``platform``'s generators.

    Installing again replaces hwrng's tracker (e.g. for another platform);
    :func:`uninstall` then restores whatever tracker was there before the
    first install.

    Parameters
    ----------
    platform
        A :class:`~hwrng.Platform`, a name, or ``None`` for
        :func:`hwrng.get_platform`'s choice.

    Raises
    ------
    DTensorHookError
        If the installed torch's hook is not the one this adapter fits, or the
        platform lacks the ``"dtensor"`` capability.
    """
    global _previous
    resolved = resolve_platform(platform)
    resolved.require_available()
    if "dtensor" not in resolved.capabilities:
        raise DTensorHookError(
            f"the {resolved.name} platform does not have the 'dtensor' capability: random "
            "ops on its tensors do not draw from its generators"
        )
    module = _hook_module()
    tracker = _tracker_class(module.OffsetBasedRNGTracker)(resolved)
    if _previous is _NOT_INSTALLED:
        _previous = getattr(module, "_rng_tracker")  # noqa: B009 - private, invisible to mypy
    setattr(module, "_rng_tracker", tracker)  # noqa: B010 - private, invisible to mypy


def uninstall() -> bool:
    """Restore the DTensor tracker that was in place before :func:`install`.

    Returns
    -------
    bool
        ``True`` if hwrng's tracker was installed and is now removed, ``False``
        if it was not installed.
    """
    global _previous
    if _previous is _NOT_INSTALLED:
        return False
    from torch.distributed.tensor import _random

    setattr(_random, "_rng_tracker", _previous)  # noqa: B010 - a private attribute mypy cannot see
    _previous = _NOT_INSTALLED
    return True


def installed_platform() -> Platform | None:
    """Return the platform of the installed hwrng tracker, or ``None``."""
    if _previous is _NOT_INSTALLED:
        return None
    from torch.distributed.tensor import _random

    platform = getattr(getattr(_random, "_rng_tracker", None), "hwrng_platform", None)
    return platform if isinstance(platform, Platform) else None
