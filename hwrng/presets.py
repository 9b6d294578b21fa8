"""Seeding presets that reproduce existing trainers' per-rank seeds exactly.

Migrating a job to hwrng should not change its randomness. Each preset has a
pure function that computes the trainer's seeds (tested against the
trainer's formula) and an ``apply`` function that seeds like the trainer does,
on any hwrng platform instead of CUDA alone.

Sources (public code, read for the formulas):

* Megatron-LM ``megatron/training/initialize.py`` ``_set_random_seed`` and
  ``megatron/core/tensor_parallel/random.py`` ``model_parallel_cuda_manual_seed``;
* slapo ``slapo/random.py`` ``set_random_seed`` and ``model_parallel_cuda_manual_seed``;
* d9d ``d9d/internals/determinism/seed.py`` ``set_seeds``;
* torchtitan ``torchtitan/distributed/utils.py`` ``set_determinism``.

One deliberate difference everywhere: torch's CPU generator is keyed with
all 64 bits of a seed (see :func:`hwrng.seed_everything`), which for seeds
below ``2**32`` -- every seed these trainers produce in practice -- is exactly
what ``torch.manual_seed`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hwrng._exceptions import MeshError, TrackerError
from hwrng._plan import ANY_STATE, SeedDim, Seeding
from hwrng._platform import Platform
from hwrng._seeding import apply_seeding, manual_seed, platform_in_force
from hwrng._states import RNGStatesTracker
from hwrng._validation import SEED_MODULUS, check_flag, check_index, check_seed

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = [
    "MEGATRON_DATA_PARALLEL_RNG",
    "MEGATRON_EXPERT_PARALLEL_RNG",
    "MEGATRON_MODEL_PARALLEL_RNG",
    "MegatronSeeds",
    "SlapoSeeds",
    "d9d_seed",
    "d9d_set_seeds",
    "get_rng_tracker",
    "megatron_manual_seed",
    "megatron_seeds",
    "slapo_seeds",
    "slapo_set_random_seed",
    "torchtitan_seed",
    "torchtitan_set_seed",
]

MEGATRON_MODEL_PARALLEL_RNG = "model-parallel-rng"
MEGATRON_EXPERT_PARALLEL_RNG = "expert-parallel-rng"
MEGATRON_DATA_PARALLEL_RNG = "data-parallel-rng"

_trackers: dict[str, RNGStatesTracker] = {}


def get_rng_tracker(platform: Platform | str | None = None) -> RNGStatesTracker:
    """Return the process-wide named-state tracker of ``platform``.

    The counterpart of Megatron-LM's ``get_cuda_rng_tracker()`` and slapo's
    ``get_cuda_rng_tracker()``: the presets fill it, model code forks it.
    """
    resolved = platform_in_force(platform)
    tracker = _trackers.get(resolved.name)
    if tracker is None:
        tracker = _trackers[resolved.name] = RNGStatesTracker(
            resolved, name=f"hwrng.presets:{resolved.name}"
        )
    return tracker


def _rank(value: object, name: str) -> int:
    return check_index(value, name)


def _check_tracker(tracker: RNGStatesTracker, seeds: dict[str, int]) -> None:
    """Refuse, before anything changes, what would make filling ``tracker`` fail halfway."""
    if tracker.forked:
        raise TrackerError(f"cannot reseed while {sorted(tracker.forked)} are forked")
    by_seed: dict[int, str] = {}
    for name, seed in seeds.items():
        if seed in by_seed:
            raise TrackerError(
                f"streams {by_seed[seed]!r} and {name!r} would share seed {seed}; "
                "choose ranks or a seed that keep them apart"
            )
        by_seed[seed] = name


# -- Megatron-LM -------------------------------------------------------------------


@dataclass(frozen=True)
class MegatronSeeds:
    """The seeds Megatron-LM gives one rank.

    Attributes
    ----------
    seed
        ``seed + 100 * pp_rank`` (``+ 10 * dp_rank`` with
        ``data_parallel_random_init``): Python ``random``, NumPy, torch, and
        the default device generator.
    tensor_parallel
        ``seed + 2718 + tp_rank``: the ``"model-parallel-rng"`` stream.
    expert_parallel
        ``seed + 1024 + 100 * ep_rank + etp_rank``: the ``"expert-parallel-rng"`` stream.
    data_parallel
        ``seed``: the ``"data-parallel-rng"`` stream (recent Megatron-Core).
    """

    seed: int
    tensor_parallel: int
    expert_parallel: int
    data_parallel: int


def megatron_seeds(
    seed: int,
    *,
    pp_rank: int = 0,
    tp_rank: int = 0,
    dp_rank: int = 0,
    ep_rank: int = 0,
    etp_rank: int = 0,
    data_parallel_random_init: bool = False,
) -> MegatronSeeds:
    """Compute Megatron-LM's seeds for one rank. Pure.

    Mirrors ``_set_random_seed`` (pipeline stages 100 apart; data-parallel
    ranks 10 apart when ``data_parallel_random_init``) followed by
    ``model_parallel_cuda_manual_seed`` (tensor-parallel offset 2718, expert
    streams ``1024 + 100 * ep_rank + etp_rank``). Results wrap modulo ``2**64``.
    """
    base = check_seed(seed)
    pp, tp, dp = _rank(pp_rank, "pp_rank"), _rank(tp_rank, "tp_rank"), _rank(dp_rank, "dp_rank")
    ep, etp = _rank(ep_rank, "ep_rank"), _rank(etp_rank, "etp_rank")
    check_flag(data_parallel_random_init, "data_parallel_random_init")
    rank_seed = base + 100 * pp
    if data_parallel_random_init:
        rank_seed += 10 * dp
    rank_seed %= SEED_MODULUS
    return MegatronSeeds(
        seed=rank_seed,
        tensor_parallel=(rank_seed + 2718 + tp) % SEED_MODULUS,
        expert_parallel=(rank_seed + 1024 + 100 * ep + etp) % SEED_MODULUS,
        data_parallel=rank_seed,
    )


def megatron_manual_seed(
    seed: int,
    *,
    pp_rank: int = 0,
    tp_rank: int = 0,
    dp_rank: int = 0,
    ep_rank: int = 0,
    etp_rank: int = 0,
    data_parallel_random_init: bool = False,
    tracker: RNGStatesTracker | None = None,
    platform: Platform | str | None = None,
) -> MegatronSeeds:
    """Seed this rank as Megatron-LM does, on any platform.

    Seeds ``random``, NumPy, torch's CPU generator and every device with
    :attr:`MegatronSeeds.seed`, then resets ``tracker`` (default:
    :func:`get_rng_tracker`) and adds ``"data-parallel-rng"``,
    ``"model-parallel-rng"`` and ``"expert-parallel-rng"`` -- so
    ``tracker.fork()`` draws from the tensor-parallel stream, as
    ``get_cuda_rng_tracker().fork()`` does in Megatron.

    Returns
    -------
    MegatronSeeds
        The seeds used.
    """
    seeds = megatron_seeds(
        seed,
        pp_rank=pp_rank,
        tp_rank=tp_rank,
        dp_rank=dp_rank,
        ep_rank=ep_rank,
        etp_rank=etp_rank,
        data_parallel_random_init=data_parallel_random_init,
    )
    resolved = platform_in_force(platform)
    resolved.require_available()
    target = tracker if tracker is not None else get_rng_tracker(resolved)
    streams = {
        MEGATRON_DATA_PARALLEL_RNG: seeds.data_parallel,
        MEGATRON_MODEL_PARALLEL_RNG: seeds.tensor_parallel,
        MEGATRON_EXPERT_PARALLEL_RNG: seeds.expert_parallel,
    }
    _check_tracker(target, streams)
    # pp (and dp) enter the seed; tp, ep and etp only the named streams: recorded with weight
    # 0, so that hwrng.verify knows along which of them each named stream should differ.
    dp = ("dp",) if data_parallel_random_init else ()
    dims = (
        SeedDim("pp", _rank(pp_rank, "pp_rank"), 100),
        SeedDim("dp", _rank(dp_rank, "dp_rank"), 10 if data_parallel_random_init else 0),
        SeedDim("tp", _rank(tp_rank, "tp_rank"), 0),
        SeedDim("ep", _rank(ep_rank, "ep_rank"), 0),
        SeedDim("etp", _rank(etp_rank, "etp_rank"), 0),
    )
    named = (
        (f"{target.name}/{MEGATRON_DATA_PARALLEL_RNG}", ("pp", *dp)),
        (f"{target.name}/{MEGATRON_MODEL_PARALLEL_RNG}", ("pp", *dp, "tp")),
        (f"{target.name}/{MEGATRON_EXPERT_PARALLEL_RNG}", ("pp", *dp, "ep", "etp")),
        (ANY_STATE, ("pp", *dp, "tp")),  # a model-parallel stream of the user's own
    )
    plan = Seeding(check_seed(seed), dims, resolved.name, "megatron", named=named)
    apply_seeding(plan, resolved)
    target.reset()
    for name, stream_seed in streams.items():
        target.add(name, stream_seed)
    return seeds


# -- slapo -------------------------------------------------------------------------


@dataclass(frozen=True)
class SlapoSeeds:
    """The seeds slapo gives one rank.

    Attributes
    ----------
    seed
        ``seed + 100 * pp_rank + 10 * dp_rank`` (absent ranks count 0):
        ``random``, NumPy and torch; what ``set_random_seed`` returns.
    default
        The default device generator's seed: ``seed``, or
        ``tensor_parallel`` with ``always_enable_tp_seed``.
    tensor_parallel
        ``seed + 2718 + tp_rank``: the ``"model-parallel-rng"`` stream, or
        ``None`` without a ``tp_rank``.
    """

    seed: int
    default: int
    tensor_parallel: int | None


def slapo_seeds(
    seed: int = 2013,
    *,
    dp_rank: int | None = None,
    pp_rank: int | None = None,
    tp_rank: int | None = None,
    always_enable_tp_seed: bool = False,
) -> SlapoSeeds:
    """Compute slapo's seeds for one rank. Pure. Results wrap modulo ``2**64``."""
    value = check_seed(seed)
    check_flag(always_enable_tp_seed, "always_enable_tp_seed")
    if pp_rank is not None:
        value += 100 * _rank(pp_rank, "pp_rank")
    if dp_rank is not None:
        value += 10 * _rank(dp_rank, "dp_rank")
    value %= SEED_MODULUS
    if tp_rank is None:
        return SlapoSeeds(seed=value, default=value, tensor_parallel=None)
    tensor_parallel = (value + 2718 + _rank(tp_rank, "tp_rank")) % SEED_MODULUS
    default = tensor_parallel if always_enable_tp_seed else value
    return SlapoSeeds(seed=value, default=default, tensor_parallel=tensor_parallel)


def slapo_set_random_seed(
    seed: int = 2013,
    *,
    dp_rank: int | None = None,
    pp_rank: int | None = None,
    tp_rank: int | None = None,
    always_enable_tp_seed: bool = False,
    tracker: RNGStatesTracker | None = None,
    platform: Platform | str | None = None,
) -> int:
    """Seed this rank as slapo's ``set_random_seed`` does, on any platform.

    With a ``tp_rank``, the default device generator gets :attr:`SlapoSeeds.default`
    and ``tracker`` (default: :func:`get_rng_tracker`) is reset to hold
    ``"model-parallel-rng"``.

    Returns
    -------
    int
        :attr:`SlapoSeeds.seed`, as slapo returns it.
    """
    seeds = slapo_seeds(
        seed,
        dp_rank=dp_rank,
        pp_rank=pp_rank,
        tp_rank=tp_rank,
        always_enable_tp_seed=always_enable_tp_seed,
    )
    resolved = platform_in_force(platform)
    resolved.require_available()
    target = tracker if tracker is not None else get_rng_tracker(resolved)
    if seeds.tensor_parallel is not None:
        _check_tracker(target, {MEGATRON_MODEL_PARALLEL_RNG: seeds.tensor_parallel})
    dims = []
    if pp_rank is not None:
        dims.append(SeedDim("pp", _rank(pp_rank, "pp_rank"), 100))
    if dp_rank is not None:
        dims.append(SeedDim("dp", _rank(dp_rank, "dp_rank"), 10))
    named: tuple[tuple[str, tuple[str, ...]], ...] = ()
    if tp_rank is not None:  # known: recorded (weight 0) for hwrng.verify to judge named states
        dims.append(SeedDim("tp", _rank(tp_rank, "tp_rank"), 0))
        along = (*(d.name for d in dims),)
        named = ((f"{target.name}/{MEGATRON_MODEL_PARALLEL_RNG}", along), (ANY_STATE, along))
    plan = Seeding(check_seed(seed), tuple(dims), resolved.name, "slapo", named=named)
    apply_seeding(plan, resolved)
    if seeds.tensor_parallel is not None:
        if seeds.default != seeds.seed:
            resolved.manual_seed_all(seeds.default)
        target.reset()
        target.add(MEGATRON_MODEL_PARALLEL_RNG, seeds.tensor_parallel)
    return seeds.seed


# -- d9d and torchtitan ------------------------------------------------------------


def d9d_seed(seed: int, distinct_rank: int) -> int:
    """d9d's seed of a rank: ``(seed + its local rank along the distinct dim) % 2**64``."""
    return (check_seed(seed) + _rank(distinct_rank, "distinct_rank")) % SEED_MODULUS


def d9d_set_seeds(
    seed: int,
    mesh: DeviceMesh,
    distinct_seed_mesh_dim: str = "pp",
    *,
    platform: Platform | str | None = None,
) -> int:
    """Seed this rank as d9d's ``set_seeds`` does: distinct along one mesh dim only.

    The same as ``hwrng.manual_seed(seed, mesh, sharded_dims=[distinct_seed_mesh_dim])``.
    d9d passes the seed to ``numpy.random.seed``, which refuses seeds of
    ``2**32`` or more; hwrng seeds NumPy with both words instead.

    Returns
    -------
    int
        This rank's seed.
    """
    return manual_seed(seed, mesh, sharded_dims=[distinct_seed_mesh_dim], platform=platform)


def torchtitan_seed(seed: int, local_ranks: Sequence[int], sizes: Sequence[int]) -> int:
    """Torchtitan's seed of a rank over its ``distinct_seed_mesh_dims``. Pure.

    ``seed + sum(local_rank[i] * prod(sizes[:i]))``: the *first* listed dim
    varies fastest, the opposite of the RFC and of :func:`hwrng.rank_seed`.
    """
    if len(local_ranks) != len(sizes):
        raise MeshError(f"{len(local_ranks)} local ranks for {len(sizes)} dim sizes")
    offset, stride = 0, 1
    for position, (rank, size) in enumerate(zip(local_ranks, sizes, strict=True)):
        if _rank(size, f"sizes[{position}]") < 1:
            raise MeshError(f"sizes[{position}] must be a positive integer, got {size!r}")
        if not 0 <= _rank(rank, f"local_ranks[{position}]") < size:
            raise MeshError(f"local_ranks[{position}]={rank} lies outside a dim of size {size}")
        offset += rank * stride
        stride *= size
    return (check_seed(seed) + offset) % SEED_MODULUS


def torchtitan_set_seed(
    seed: int,
    mesh: DeviceMesh,
    distinct_seed_mesh_dims: Sequence[str],
    *,
    platform: Platform | str | None = None,
    deterministic: bool = False,
) -> int:
    """Seed this rank with torchtitan's seed (first distinct dim fastest).

    The same as :func:`hwrng.manual_seed` with the dims reversed. torchtitan
    seeds only torch; hwrng also seeds ``random`` and NumPy, which changes
    no torch draw.
    """
    if isinstance(distinct_seed_mesh_dims, str) or not isinstance(
        distinct_seed_mesh_dims, Sequence
    ):
        raise MeshError(
            "distinct_seed_mesh_dims must be an ordered sequence such as ['pp'], got "
            f"{distinct_seed_mesh_dims!r}"
        )
    return manual_seed(
        seed,
        mesh,
        sharded_dims=list(reversed(distinct_seed_mesh_dims)),
        platform=platform,
        deterministic=deterministic,
    )
