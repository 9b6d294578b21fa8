"""DTensor random ops under torch's ``LocalTensorMode``: simulated ranks in one process.

torch's own tests and tools run "ranks" as entries of a LocalTensor, each with
an RNG state of its own saved in the mode. torch's local tracker cannot serve
hwrng (it needs ``torch.cpu.get_rng_state``, puts every rank on rank 0's seed,
and misreads sub-mesh coordinates), so the adapter positions each simulated
rank's saved state itself: at the start of that rank's shard on entry, past
every shard on exit -- what a real rank's region does.

Under the mode each simulated rank draws with its own generator's seed (the
seed plan is a per-process record; there is one process here). The private
parts of torch used are checked on first use, with a clear error if they move.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from hwrng import _recompute as recompute
from hwrng._exceptions import DTensorHookError, RecomputationError
from hwrng._platform import Platform
from hwrng._sharding import ShardSpec, shard_offsets

__all__ = ["local_tensor_mode", "simulated_region"]

_NEEDED = (
    "enabled_local_tensor_mode",
    "_map_to_rank_local_val",
    "_get_rng_state",
    "_set_rng_state",
)


def _local_module() -> Any:
    try:
        from torch.distributed import _local_tensor
    except ImportError:
        return None
    return _local_tensor


def local_tensor_mode() -> Any:
    """The enabled LocalTensorMode, or ``None`` (also when this torch has none)."""
    module = _local_module()
    if module is None or not hasattr(module, "enabled_local_tensor_mode"):
        return None
    return module.enabled_local_tensor_mode()


def _checked(module: Any, mode: Any) -> None:
    missing = [name for name in _NEEDED if not hasattr(module, name)]
    missing += [a for a in ("ranks", "_per_rank_rng_states", "disable") if not hasattr(mode, a)]
    if missing:
        raise DTensorHookError(
            f"torch {torch.__version__}'s LocalTensorMode lacks {missing}, which hwrng's "
            "adapter uses to run DTensor random ops on simulated ranks"
        )


@contextlib.contextmanager
def simulated_region(
    mode: Any, platform: Platform, spec: Any, generator: torch.Generator | None
) -> Iterator[None]:
    """A tracked region for every simulated rank of ``mode`` (see the module notes).

    Refused in a recomputation of an activation checkpoint: torch rewinds no
    simulated rank's saved state before it recomputes, and hwrng does not
    journal them, so the recomputation would draw other numbers.
    """
    where = recompute.site()
    if where is not None and where.replaying:
        raise RecomputationError(
            "DTensor random ops on LocalTensorMode's simulated ranks cannot be recomputed: "
            "torch's activation checkpointing rewinds no simulated rank's generator, so the "
            "recomputation would draw other numbers than the forward. Run the block without "
            "activation checkpointing under LocalTensorMode, or on real ranks"
        )
    module = _local_module()
    _checked(module, mode)
    ranks = sorted(mode.ranks)
    coordinates = {
        r: tuple(int(module._map_to_rank_local_val(c, r)) for c in spec.mesh.get_coordinate())
        for r in ranks
    }
    with mode.disable():
        offsets = {
            r: shard_offsets(ShardSpec.from_dtensor_spec(spec, coordinates[r])) for r in ranks
        }
        user = None if generator is None else platform.counter.peek(generator)
        saved: dict[int, Any] = {}
        ends: dict[int, tuple[int, int]] = {}

        def enter(rank: int, default: torch.Generator) -> None:
            start, end = offsets[rank]
            if user is None:
                seed, offset = platform.counter.peek(default)
                ends[rank] = (seed, offset + end)
            else:
                saved[rank] = default.get_state()
                seed, offset = user
            platform.position(default, seed, offset + start)

        def leave(rank: int, default: torch.Generator) -> None:
            if user is None:
                platform.position(default, *ends[rank])
            else:
                default.set_state(saved[rank])

        _each_rank(module, mode, platform, ranks, enter)
    try:
        yield
    finally:
        with mode.disable():
            _each_rank(module, mode, platform, ranks, leave)
            if generator is not None and user is not None:
                end = max(end for _, end in offsets.values())
                platform.position(generator, user[0], user[1] + end)


def _each_rank(module: Any, mode: Any, platform: Platform, ranks: list[int], act: Any) -> None:
    """Load each simulated rank's RNG state, ``act`` on its default generator, save it back."""
    outer = module._get_rng_state()
    try:
        for rank in ranks:
            module._set_rng_state(*mode._per_rank_rng_states[rank])
            act(rank, platform.generator())
            mode._per_rank_rng_states[rank] = module._get_rng_state()
    finally:
        module._set_rng_state(*outer)
