"""hwrng: random-number state for distributed PyTorch training on any hardware.

hwrng seeds every rank for its place in the device mesh, keeps sharded random
ops consistent (replicas draw the same numbers, shards independent ones),
forks and restores RNG state, and does it once for every accelerator through
a small :class:`Platform` interface whose backends are pluggy plugins.

Everything public is importable from here; the modules behind it are private
(``hwrng._seeding``, ...) except :mod:`hwrng.dtensor` (the DTensor adapter),
:mod:`hwrng.invariant` (placement-invariant random ops), :mod:`hwrng.presets`
(trainers' seeding formulas), :mod:`hwrng.hookspecs` (the plugin contract),
:mod:`hwrng.testing` (a pool of real ``torch.distributed`` processes for tests),
:mod:`hwrng.checkpoint` (the checkpoint family, also reached from here),
:mod:`hwrng.integrations` (trainers) and the built-in CPU backend
:mod:`hwrng.backends.cpu`. The accelerator backends and the conformance suite
are distributions of their own (``hwrng-cuda``, ``hwrng-npu``,
``hwrng-conformance``: ``pip install "hwrng[cuda]"``, ...).
"""

from __future__ import annotations

# First: a torch below hwrng's floor is refused by name (TorchVersionError, an ImportError)
# before any module below reaches for a part of torch that such a torch lacks.
from hwrng import _torch_floor  # noqa: F401  (it checks when imported)

# isort: split
from typing import TYPE_CHECKING

from hwrng._counters import PhiloxCounter
from hwrng._device_module import DeviceModule, DeviceModulePlatform
from hwrng._exceptions import (
    AmbiguousBackendError,
    BackendError,
    BackendNotFoundError,
    BackendUnavailableError,
    CheckpointError,
    DistributedError,
    DTensorHookError,
    DuplicateBackendError,
    HwrngError,
    HwrngWarning,
    InvalidArgumentError,
    InvalidDeviceError,
    InvalidOffsetError,
    InvalidSeedError,
    InvalidStateError,
    InvalidValueError,
    MeshError,
    NestingError,
    RecomputationError,
    TrackerError,
    UnknownStateError,
    VerificationError,
    WorkerError,
)
from hwrng._fork import fork_rng, isolate_rng
from hwrng._host import MersenneCounter, host_counter, mersenne_state
from hwrng._plan import SeedDim, Seeding, rank_seed, seed_plan
from hwrng._platform import CounterView, DeviceLike, Platform, collective_backend
from hwrng._registry import (
    BrokenPlugin,
    PlatformInfo,
    get_platform,
    list_platforms,
    register_plugin,
    unregister_plugin,
)
from hwrng._seeding import current_seeding, manual_seed, seed_everything
from hwrng._sharding import ShardSpec, shard_offsets
from hwrng._state_digest import mersenne_state_digest, whole_state_digest
from hwrng._states import RNGStatesTracker
from hwrng._tracker import OffsetTracker
from hwrng._version import __version__
from hwrng._workers import WorkerInitFn, WorkerSeeds, worker_init_fn, worker_seeds
from hwrng.checkpoint import OnMismatch, RNGState, load, load_state_dict, save, state_dict
from hwrng.hookspecs import hookimpl
from hwrng.verify import StreamVerdict, VerifyReport, verify

if TYPE_CHECKING:
    from hwrng.checkpoint._planners import RNGLoadPlanner, RNGSavePlanner

# Submodules reached as attributes: dtensor imports torch.distributed.tensor only when used.
_LAZY_SUBMODULES = ("dtensor", "invariant", "presets", "testing")
# Names whose module imports torch.distributed.checkpoint, loaded when first used.
_LAZY_NAMES = {
    "RNGLoadPlanner": "hwrng.checkpoint._planners",
    "RNGSavePlanner": "hwrng.checkpoint._planners",
}


def __getattr__(name: str) -> object:
    import importlib

    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"hwrng.{name}")
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(_LAZY_NAMES[name]), name)
    raise AttributeError(f"module 'hwrng' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_SUBMODULES) | set(_LAZY_NAMES))


__all__ = [
    "AmbiguousBackendError",
    "BackendError",
    "BackendNotFoundError",
    "BackendUnavailableError",
    "BrokenPlugin",
    "CheckpointError",
    "CounterView",
    "DTensorHookError",
    "DeviceLike",
    "DeviceModule",
    "DeviceModulePlatform",
    "DistributedError",
    "DuplicateBackendError",
    "HwrngError",
    "HwrngWarning",
    "InvalidArgumentError",
    "InvalidDeviceError",
    "InvalidOffsetError",
    "InvalidSeedError",
    "InvalidStateError",
    "InvalidValueError",
    "MersenneCounter",
    "MeshError",
    "NestingError",
    "OffsetTracker",
    "OnMismatch",
    "PhiloxCounter",
    "Platform",
    "PlatformInfo",
    "RNGLoadPlanner",
    "RNGSavePlanner",
    "RNGState",
    "RNGStatesTracker",
    "RecomputationError",
    "SeedDim",
    "Seeding",
    "ShardSpec",
    "StreamVerdict",
    "TrackerError",
    "UnknownStateError",
    "VerificationError",
    "VerifyReport",
    "WorkerError",
    "WorkerInitFn",
    "WorkerSeeds",
    "__version__",
    "collective_backend",
    "current_seeding",
    "dtensor",
    "fork_rng",
    "get_platform",
    "hookimpl",
    "host_counter",
    "invariant",
    "isolate_rng",
    "list_platforms",
    "load",
    "load_state_dict",
    "manual_seed",
    "mersenne_state",
    "mersenne_state_digest",
    "presets",
    "rank_seed",
    "register_plugin",
    "save",
    "seed_everything",
    "seed_plan",
    "shard_offsets",
    "state_dict",
    "testing",
    "unregister_plugin",
    "verify",
    "whole_state_digest",
    "worker_init_fn",
    "worker_seeds",
]
