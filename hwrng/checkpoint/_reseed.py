"""Re-deriving every stream from a saved seed plan, the elastic way across a change of world.

``on_mismatch="reseed"`` is the explicit way across a change of world size or
mesh (or past a checkpoint that holds no usable state for a rank): every
stream is re-derived from the saved job's plan for the new mesh, as the plan's
next *resume generation*, the device generators continue at the saved DTensor
position, and a warning says so. A checkpoint with no hwrng state at all
moves the plan in force to its next generation with a new seed
(:func:`plan_fresh`). Planning changes nothing; :func:`carry_out_reseed` does.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hwrng._claims import claim
from hwrng._collectives import rank_and_size
from hwrng._exceptions import CheckpointError, HwrngError, HwrngWarning
from hwrng._host import host_generator
from hwrng._plan import Seeding, generation_seed, plan_for_mesh
from hwrng._platform import Platform
from hwrng._seeding import current_seeding, record_seeding, seed_streams, seeded_mesh
from hwrng._states import live_trackers
from hwrng.checkpoint._capture import device_generators

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["Reseed", "carry_out_reseed", "plan_fresh", "plan_reseed"]


@dataclass
class Reseed:
    """A checked re-derivation: the new plan, where the device streams continue, and why.

    ``fresh``: the checkpoint held nothing to continue from, so every stream,
    the devices' too, starts at the beginning of the new plan's seeds.
    """

    plan: Seeding
    position: int
    why: str
    fresh: bool = False


def _refuse_while_forked(why: str) -> None:
    forked = sorted(name for name, t in live_trackers().items() if t.forked)
    if forked:
        raise CheckpointError(
            f"cannot re-derive the streams ({why}) while trackers {forked} hold a forked state"
        )


def plan_fresh(why: str) -> Reseed:
    """Plan a re-derivation when the checkpoint holds no hwrng state at all; change nothing.

    The plan in force moves to its next resume generation, *seed included*
    (``generation_seed(seed, g)``): without a saved position nothing can
    continue, and new seeds are the way not to repeat the saved job's draws.
    """
    plan = current_seeding()
    if plan is None:
        raise CheckpointError(
            f"cannot re-derive the streams ({why}): no seed plan is in force to derive "
            "them from; seed with hwrng.manual_seed first"
        )
    _refuse_while_forked(why)
    generation = plan.generation + 1
    fresh = dataclasses.replace(
        plan, seed=generation_seed(plan.seed, generation), generation=generation
    )
    return Reseed(fresh, 0, why, fresh=True)


def plan_reseed(
    saved: Seeding | None,
    position: int,
    mesh: DeviceMesh | None,
    platform: Platform,
    why: str,
) -> Reseed:
    """Plan the re-derivation of this rank's streams from the saved job's plan; change nothing.

    The new plan is the saved one (seed, sharded dims) for ``mesh``, one
    resume generation later; a single process without a mesh is every
    sharded dim's coordinate 0.
    """
    if saved is None:
        raise CheckpointError(
            f"cannot re-derive the streams ({why}): the saved state records no seed plan"
        )
    _, world_size = rank_and_size()
    if mesh is not None:
        try:
            plan = plan_for_mesh(saved.seed, mesh, saved.sharded_dims, platform.name, saved.source)
        except HwrngError as error:
            raise CheckpointError(f"cannot re-derive the streams ({why}): {error}") from None
    elif saved.layout is not None and world_size > 1:
        raise CheckpointError(
            f"cannot re-derive the streams ({why}): the plan was made on a mesh, so "
            "pass the new one: on_mismatch='reseed', mesh=new_mesh"
        )
    elif saved.layout is None and saved.dims:
        raise CheckpointError(
            f"cannot re-derive the streams ({why}): the saved plan ({saved.source}) was not "
            "made on a DeviceMesh; seed the new mesh yourself"
        )
    else:  # one process: every coordinate is 0
        plan = Seeding(saved.seed, (), platform.name, saved.source)
    _refuse_while_forked(why)
    plan = dataclasses.replace(plan, generation=saved.generation + 1, named=saved.named)
    return Reseed(plan, position, why)


def carry_out_reseed(reseed: Reseed, platform: Platform, mesh: DeviceMesh | None) -> None:
    """Re-derive this rank's streams as planned, and warn saying what was done."""
    plan = reseed.plan
    own = plan.rank_seed
    host = host_generator()
    devices = device_generators(platform) or [host]
    trackers = {name: t for name, t in live_trackers().items() if t.names}
    states = f"named states {sorted(trackers)}" if trackers else "named states"
    if reseed.fresh:
        with claim(host, *devices):
            seed_streams(own, platform)
            for tracker in trackers.values():
                tracker.set_states(tracker.generation_states(plan.generation))
            record_seeding(plan, seeded_mesh())
        warnings.warn(
            f"hwrng: nothing was restored ({reseed.why}); every stream was re-derived as resume "
            f"generation {plan.generation} of the plan in force, from the seed "
            f"generation_seed(seed, {plan.generation}) = {plan.seed}, and {states} "
            "alike: new streams, which repeat nothing the saved job "
            "drew and do not continue it.",
            HwrngWarning,
            stacklevel=4,
        )
        return
    with claim(host, *devices):
        seed_streams(generation_seed(own, plan.generation), platform)
        for generator in devices:  # the DTensor stream (and the devices) continue
            platform.position(generator, own, reseed.position)
        for tracker in trackers.values():
            tracker.set_states(tracker.generation_states(plan.generation))
        record_seeding(plan, mesh)
    warnings.warn(
        f"hwrng: the RNG state was not restored ({reseed.why}); every stream was re-derived "
        f"from the saved seed plan (seed {plan.seed}, sharded {list(plan.sharded_dims)}) for "
        f"this mesh as resume generation {plan.generation}: the device generators continue "
        f"at the saved DTensor position (offset {reseed.position}); random, NumPy, "
        f"{'' if devices == [host] else 'torch CPU, '}PYTHONHASHSEED and {states} "
        "start streams of their own, keyed by their seeds and the "
        "generation, never one the saved job drew.",
        HwrngWarning,
        stacklevel=4,
    )
