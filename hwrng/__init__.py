"""hwrng: random-number state for distributed PyTorch training on any hardware.

hwrng seeds every rank for its place in the device mesh, keeps sharded random
ops consistent (replicas draw the same numbers, shards independent ones),
forks and restores RNG state, and does it once for every accelerator through
a small :class:`Platform` interface whose backends are pluggy plugins.
"""

from __future__ import annotations

from hwrng.errors import (
    AmbiguousBackendError,
    BackendError,
    BackendNotFoundError,
    BackendUnavailableError,
    DTensorHookError,
    DuplicateBackendError,
    HwrngError,
    InvalidDeviceError,
    InvalidOffsetError,
    InvalidSeedError,
    InvalidStateError,
    MeshError,
)
from hwrng.fork import fork_rng
from hwrng.hookspecs import hookimpl
from hwrng.platform import DeviceModulePlatform, Platform
from hwrng.registry import (
    PlatformInfo,
    get_platform,
    list_platforms,
    register_plugin,
    unregister_plugin,
)
from hwrng.seeding import last_seed, manual_seed, rank_seed, seed_everything, seed_plan
from hwrng.sharding import ShardSpec, shard_offsets
from hwrng.states import RNGStatesTracker
from hwrng.tracker import OffsetTracker
from hwrng.version import __version__
from hwrng.workers import WorkerInitFn, worker_init_fn

# Submodules reached as attributes; dtensor imports torch.distributed.tensor only when used.
_LAZY_SUBMODULES = ("dtensor", "presets")


def __getattr__(name: str) -> object:
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"hwrng.{name}")
    raise AttributeError(f"module 'hwrng' has no attribute {name!r}")


__all__ = [
    "AmbiguousBackendError",
    "BackendError",
    "BackendNotFoundError",
    "BackendUnavailableError",
    "DTensorHookError",
    "DeviceModulePlatform",
    "DuplicateBackendError",
    "HwrngError",
    "InvalidDeviceError",
    "InvalidOffsetError",
    "InvalidSeedError",
    "InvalidStateError",
    "MeshError",
    "OffsetTracker",
    "Platform",
    "PlatformInfo",
    "RNGStatesTracker",
    "ShardSpec",
    "WorkerInitFn",
    "__version__",
    "fork_rng",
    "get_platform",
    "hookimpl",
    "last_seed",
    "list_platforms",
    "manual_seed",
    "rank_seed",
    "register_plugin",
    "seed_everything",
    "seed_plan",
    "shard_offsets",
    "unregister_plugin",
    "worker_init_fn",
]
