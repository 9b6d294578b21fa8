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

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hwrng._exceptions import HwrngWarning, InvalidArgumentError, MeshError, TrackerError
from hwrng._formulas import Collision, Formula, collisions, linear_formula
from hwrng._mesh import check_sizes, require_known
from hwrng._plan import ANY_STATE, DEVICE_STREAMS, SeedDim, Seeding
from hwrng._platform import Platform
from hwrng._registry import platform_in_force
from hwrng._seeding import apply_seeding, manual_seed
from hwrng._states import RNGStatesTracker
from hwrng._validation import SEED_MODULUS, check_flag, check_index, check_seed

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = [
    "DEFAULT_STREAM",
    "MEGATRON_DATA_PARALLEL_RNG",
    "MEGATRON_EXPERT_PARALLEL_RNG",
    "MEGATRON_MODEL_PARALLEL_RNG",
    "PRESETS",
    "Collision",
    "Formula",
    "MegatronSeeds",
    "SlapoSeeds",
    "d9d_seed",
    "d9d_set_seeds",
    "find_collisions",
    "get_rng_tracker",
    "megatron_manual_seed",
    "megatron_seeds",
    "plan_formulas",
    "preset_formulas",
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


# -- formulas and their collisions ------------------------------------------------


#: The presets :func:`preset_formulas` knows.
PRESETS = ("megatron", "slapo", "d9d", "torchtitan")
#: The default generators' stream, as formulas name it.
DEFAULT_STREAM = "seed"


def _sizes(sizes: Mapping[str, int] | None, known: Sequence[str]) -> dict[str, int] | None:
    if sizes is None:
        return None
    checked = check_sizes(sizes)
    require_known(list(checked), known, "dim(s) of sizes")
    return checked


def _check_coordinate(coordinate: Mapping[str, int], sizes: Mapping[str, int] | None) -> None:
    for dim, value in coordinate.items():
        if sizes is not None and value >= sizes.get(dim, 1):
            raise MeshError(
                f"{dim}_rank={value} lies outside sizes[{dim!r}]={sizes.get(dim, 1)} "
                "(a dim missing from sizes has size 1)"
            )


def _megatron_formulas(
    data_parallel_random_init: bool, collision_free: bool, sizes: Mapping[str, int] | None
) -> dict[str, Formula]:
    stage = ("pp", "dp") if data_parallel_random_init else ("pp",)
    tensor, expert = (*stage, "tp"), (*stage, "ep", "etp")
    if collision_free:
        if sizes is None:
            raise InvalidArgumentError(
                "collision_free=True numbers ranks by a linear index: pass sizes= (the size of "
                "each of pp, dp, tp, ep, etp the job uses; a dim left out has size 1)"
            )
        return {
            DEFAULT_STREAM: linear_formula(DEFAULT_STREAM, 0, stage, sizes, "hwrng"),
            MEGATRON_MODEL_PARALLEL_RNG: linear_formula(
                MEGATRON_MODEL_PARALLEL_RNG, 1, tensor, sizes, "hwrng"
            ),
            MEGATRON_EXPERT_PARALLEL_RNG: linear_formula(
                MEGATRON_EXPERT_PARALLEL_RNG, 2, expert, sizes, "hwrng"
            ),
            MEGATRON_DATA_PARALLEL_RNG: linear_formula(
                MEGATRON_DATA_PARALLEL_RNG, 0, stage, sizes, "hwrng"
            ),
        }
    base = (("pp", 100), ("dp", 10)) if data_parallel_random_init else (("pp", 100),)
    author = "Megatron-LM"
    return {
        DEFAULT_STREAM: Formula(DEFAULT_STREAM, base, stage, author),
        MEGATRON_MODEL_PARALLEL_RNG: Formula(
            MEGATRON_MODEL_PARALLEL_RNG, (*base, ("", 2718), ("tp", 1)), tensor, author
        ),
        MEGATRON_EXPERT_PARALLEL_RNG: Formula(
            MEGATRON_EXPERT_PARALLEL_RNG,
            (*base, ("", 1024), ("ep", 100), ("etp", 1)),
            expert,
            author,
        ),
        MEGATRON_DATA_PARALLEL_RNG: Formula(MEGATRON_DATA_PARALLEL_RNG, base, stage, author),
    }


def _slapo_formulas(
    given: Sequence[str], collision_free: bool, sizes: Mapping[str, int] | None
) -> dict[str, Formula]:
    stage = tuple(d for d in ("pp", "dp") if d in given)
    formulas: dict[str, Formula] = {}
    if collision_free:
        if sizes is None:
            raise InvalidArgumentError(
                "collision_free=True numbers ranks by a linear index: pass sizes= (the size of "
                "each of pp, dp, tp the job uses; a dim left out has size 1)"
            )
        formulas[DEFAULT_STREAM] = linear_formula(DEFAULT_STREAM, 0, stage, sizes, "hwrng")
        if "tp" in given:
            formulas[MEGATRON_MODEL_PARALLEL_RNG] = linear_formula(
                MEGATRON_MODEL_PARALLEL_RNG, 1, (*stage, "tp"), sizes, "hwrng"
            )
        return formulas
    base = tuple((d, {"pp": 100, "dp": 10}[d]) for d in stage)
    formulas[DEFAULT_STREAM] = Formula(DEFAULT_STREAM, base, stage, "slapo")
    if "tp" in given:
        formulas[MEGATRON_MODEL_PARALLEL_RNG] = Formula(
            MEGATRON_MODEL_PARALLEL_RNG, (*base, ("", 2718), ("tp", 1)), (*stage, "tp"), "slapo"
        )
    return formulas


def preset_formulas(
    preset: str,
    *,
    sizes: Mapping[str, int] | None = None,
    data_parallel_random_init: bool = False,
    collision_free: bool = False,
    dims: Sequence[str] | None = None,
) -> dict[str, Formula]:
    """Every stream's seed formula of a preset, by stream (``"seed"``: the default generators).

    Parameters
    ----------
    preset
        One of :data:`PRESETS`.
    sizes
        Each dim's size (needed by ``collision_free`` and by torchtitan).
    data_parallel_random_init
        Megatron-LM's option: data-parallel ranks 10 apart.
    collision_free
        Megatron-LM and slapo: hwrng's formulas instead of the trainer's, a
        linear index over each stream's dims (``seed + stream * 2**48 + index``),
        which no two ranks meant to differ ever share; the numbers differ from
        the trainer's.
    dims
        slapo: the ranks it is given (default pp, dp, tp); d9d: the one distinct
        dim (default pp); torchtitan: the distinct dims, first fastest.

    Returns
    -------
    dict of str to Formula
        The formulas, for :func:`find_collisions` or to compute a rank's seeds.
    """
    check_flag(data_parallel_random_init, "data_parallel_random_init")
    check_flag(collision_free, "collision_free")
    if preset == "megatron":
        known = _sizes(sizes, ("pp", "dp", "tp", "ep", "etp"))
        return _megatron_formulas(data_parallel_random_init, collision_free, known)
    if preset == "slapo":
        given = tuple(dims) if dims is not None else ("pp", "dp", "tp")
        require_known(given, ("pp", "dp", "tp"), "slapo rank(s)")
        return _slapo_formulas(given, collision_free, _sizes(sizes, ("pp", "dp", "tp")))
    if collision_free or data_parallel_random_init:
        raise InvalidArgumentError(
            f"the {preset} preset has no such option: its seeds never collide"
        )
    if preset == "d9d":
        (dim,) = tuple(dims) if dims is not None else ("pp",)
        return {DEFAULT_STREAM: Formula(DEFAULT_STREAM, ((dim, 1),), (dim,), "d9d")}
    if preset == "torchtitan":
        distinct = tuple(dims or ())
        known = check_sizes(sizes) if sizes is not None else {}
        weights, stride = [], 1
        for dim in distinct:
            weights.append((dim, stride))
            stride *= known.get(dim, 1)
        return {DEFAULT_STREAM: Formula(DEFAULT_STREAM, tuple(weights), distinct, "torchtitan")}
    raise InvalidArgumentError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")


def find_collisions(
    formulas: Mapping[str, Formula], seed: int, sizes: Mapping[str, int], limit: int = 16
) -> tuple[list[Collision], int]:
    """Ranks each formula gives one seed though they should draw apart, over a layout.

    Streams with one formula (Megatron's default and ``"data-parallel-rng"``)
    are reported once. Returns the first ``limit`` collisions and how many
    shared seeds there are in all.
    """
    found: list[Collision] = []
    total = 0
    seen: set[tuple[object, ...]] = set()
    for formula in formulas.values():
        if (formula.terms, formula.along) in seen:
            continue
        seen.add((formula.terms, formula.along))
        some, count = collisions(formula, check_seed(seed), check_sizes(sizes), limit)
        found += some
        total += count
    return found[:limit], total


def plan_formulas(plan: Seeding) -> dict[str, Formula]:
    """The trainer's formulas behind a plan a preset recorded (empty for any other plan).

    ``hwrng.verify`` names them as the cause when ranks draw alike under them.
    Plans seeded with ``collision_free=True`` give none: their seeds never collide.
    """
    dims = {d.name: d for d in plan.dims}
    if plan.source == "megatron":
        dp = dims.get("dp")
        return preset_formulas("megatron", data_parallel_random_init=bool(dp and dp.weight))
    if plan.source == "slapo":
        return preset_formulas("slapo", dims=tuple(dims))
    return {}


def _warn_if_colliding(
    formulas: Mapping[str, Formula],
    seed: int,
    coordinate: Mapping[str, int],
    sizes: Mapping[str, int] | None,
    fix: str,
) -> None:
    """Warn when the formulas collide on the layout.

    Without ``sizes``, the layout is what this rank's coordinates prove exists:
    every coordinate below its own.
    """
    layout = dict(sizes) if sizes is not None else {d: c + 1 for d, c in coordinate.items()}
    found, total = find_collisions(formulas, seed, layout, limit=2)
    if not found:
        return
    more = f" (and {total - len(found)} more seed(s) shared)" if total > len(found) else ""
    warnings.warn(
        HwrngWarning(
            "ranks that should draw apart get one seed, so they draw alike and hwrng.verify "
            f"will fail them: {'; '.join(c.describe() for c in found)}{more}. {fix}"
        ),
        stacklevel=3,
    )


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


_MEGATRON_FIX = (
    "Megatron-LM's own formulas do this on the same layout; to keep the ranks apart, seed "
    "with collision_free=True and sizes={...} (hwrng's formulas: the numbers then differ from "
    "Megatron-LM's)"
)


def _megatron(
    seed: int,
    coordinate: dict[str, int],
    data_parallel_random_init: bool,
    collision_free: bool,
    sizes: Mapping[str, int] | None,
) -> tuple[MegatronSeeds, dict[str, Formula]]:
    """One rank's seeds and the formulas that gave them, after checking every argument."""
    base = check_seed(seed)
    formulas = preset_formulas(
        "megatron",
        sizes=sizes,
        data_parallel_random_init=data_parallel_random_init,
        collision_free=collision_free,
    )
    _check_coordinate(coordinate, None if sizes is None else check_sizes(sizes))
    seeds = {name: f.seed(base, coordinate) for name, f in formulas.items()}
    found = MegatronSeeds(
        seed=seeds[DEFAULT_STREAM],
        tensor_parallel=seeds[MEGATRON_MODEL_PARALLEL_RNG],
        expert_parallel=seeds[MEGATRON_EXPERT_PARALLEL_RNG],
        data_parallel=seeds[MEGATRON_DATA_PARALLEL_RNG],
    )
    return found, formulas


def _megatron_coordinate(
    pp_rank: int, tp_rank: int, dp_rank: int, ep_rank: int, etp_rank: int
) -> dict[str, int]:
    return {
        "pp": _rank(pp_rank, "pp_rank"),
        "dp": _rank(dp_rank, "dp_rank"),
        "tp": _rank(tp_rank, "tp_rank"),
        "ep": _rank(ep_rank, "ep_rank"),
        "etp": _rank(etp_rank, "etp_rank"),
    }


def megatron_seeds(
    seed: int,
    *,
    pp_rank: int = 0,
    tp_rank: int = 0,
    dp_rank: int = 0,
    ep_rank: int = 0,
    etp_rank: int = 0,
    data_parallel_random_init: bool = False,
    collision_free: bool = False,
    sizes: Mapping[str, int] | None = None,
) -> MegatronSeeds:
    """Compute Megatron-LM's seeds for one rank. Pure.

    Mirrors ``_set_random_seed`` (pipeline stages 100 apart; data-parallel
    ranks 10 apart when ``data_parallel_random_init``) followed by
    ``model_parallel_cuda_manual_seed`` (tensor-parallel offset 2718, expert
    streams ``1024 + 100 * ep_rank + etp_rank``). Results wrap modulo ``2**64``.
    With ``collision_free`` (which needs ``sizes``, each dim's size), hwrng's
    formulas of :func:`preset_formulas` instead.
    """
    return _megatron(
        seed,
        _megatron_coordinate(pp_rank, tp_rank, dp_rank, ep_rank, etp_rank),
        data_parallel_random_init,
        collision_free,
        sizes,
    )[0]


def megatron_manual_seed(
    seed: int,
    *,
    pp_rank: int = 0,
    tp_rank: int = 0,
    dp_rank: int = 0,
    ep_rank: int = 0,
    etp_rank: int = 0,
    data_parallel_random_init: bool = False,
    collision_free: bool = False,
    sizes: Mapping[str, int] | None = None,
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

    Megatron-LM's formulas give ranks that should differ one seed on some
    layouts: the expert stream ``seed + 100*pp + 1024 + 100*ep + etp`` on any
    with ``pp >= 2`` and ``ep >= 2`` (``(pp=0, ep=1)`` and ``(pp=1, ep=0)``),
    and ``data_parallel_random_init``'s ``10*dp`` against ``100*pp`` from a dp
    rank of 10. Such a layout draws an :class:`~hwrng.HwrngWarning` naming the
    stream and the coordinates -- for the whole layout when ``sizes`` is
    given, else for the ranks this rank's coordinates prove exist -- and
    ``collision_free=True`` (with ``sizes``) seeds with hwrng's formulas
    instead, which never collide. ``hwrng plan --preset megatron`` shows the
    same before a job starts.

    Parameters
    ----------
    seed
        The job's seed.
    pp_rank, tp_rank, dp_rank, ep_rank, etp_rank
        This rank's coordinates.
    data_parallel_random_init
        Megatron-LM's option of the same name.
    collision_free
        Seed with :func:`preset_formulas`'s collision-free formulas.
    sizes
        Each dim's size (``{"pp": 2, "ep": 2}``; a dim left out has size 1).
    tracker
        The tracker to fill (default :func:`get_rng_tracker`).
    platform
        Whose devices to seed (default: the platform in force).

    Returns
    -------
    MegatronSeeds
        The seeds used.
    """
    coordinate = _megatron_coordinate(pp_rank, tp_rank, dp_rank, ep_rank, etp_rank)
    seeds, formulas = _megatron(seed, coordinate, data_parallel_random_init, collision_free, sizes)
    resolved = platform_in_force(platform)
    resolved.require_available()
    target = tracker if tracker is not None else get_rng_tracker(resolved)
    streams = {
        MEGATRON_DATA_PARALLEL_RNG: seeds.data_parallel,
        MEGATRON_MODEL_PARALLEL_RNG: seeds.tensor_parallel,
        MEGATRON_EXPERT_PARALLEL_RNG: seeds.expert_parallel,
    }
    _check_tracker(target, streams)
    _warn_if_colliding(formulas, seed, coordinate, sizes, _MEGATRON_FIX)
    # The default seed's terms, then tp, ep and etp, which enter only the named streams:
    # recorded with weight 0, so that hwrng.verify knows along which of them each named
    # stream should differ.
    default = formulas[DEFAULT_STREAM]
    dims = tuple(
        SeedDim(d, coordinate[d], default.weight(d), None if sizes is None else sizes.get(d, 1))
        for d in ("pp", "dp", "tp", "ep", "etp")
    )
    tracked = (
        MEGATRON_DATA_PARALLEL_RNG,
        MEGATRON_MODEL_PARALLEL_RNG,
        MEGATRON_EXPERT_PARALLEL_RNG,
    )
    named = (
        *((f"{target.name}/{stream}", formulas[stream].along) for stream in tracked),
        (
            ANY_STATE,
            formulas[MEGATRON_MODEL_PARALLEL_RNG].along,
        ),  # a model-parallel stream of its own
    )
    source = "megatron (collision-free)" if collision_free else "megatron"
    plan = Seeding(check_seed(seed), dims, resolved.name, source, named=named)
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


def _slapo(
    seed: int,
    coordinate: dict[str, int],
    always_enable_tp_seed: bool,
    collision_free: bool,
    sizes: Mapping[str, int] | None,
) -> tuple[SlapoSeeds, dict[str, Formula]]:
    """One rank's seeds and the formulas that gave them, after checking every argument."""
    base = check_seed(seed)
    check_flag(always_enable_tp_seed, "always_enable_tp_seed")
    formulas = preset_formulas(
        "slapo", sizes=sizes, collision_free=collision_free, dims=tuple(coordinate)
    )
    _check_coordinate(coordinate, None if sizes is None else check_sizes(sizes))
    value = formulas[DEFAULT_STREAM].seed(base, coordinate)
    if "tp" not in coordinate:
        return SlapoSeeds(seed=value, default=value, tensor_parallel=None), formulas
    tensor_parallel = formulas[MEGATRON_MODEL_PARALLEL_RNG].seed(base, coordinate)
    default = tensor_parallel if always_enable_tp_seed else value
    return SlapoSeeds(seed=value, default=default, tensor_parallel=tensor_parallel), formulas


def _slapo_coordinate(
    dp_rank: int | None, pp_rank: int | None, tp_rank: int | None
) -> dict[str, int]:
    given = {"pp": pp_rank, "dp": dp_rank, "tp": tp_rank}
    return {d: _rank(v, f"{d}_rank") for d, v in given.items() if v is not None}


def slapo_seeds(
    seed: int = 2013,
    *,
    dp_rank: int | None = None,
    pp_rank: int | None = None,
    tp_rank: int | None = None,
    always_enable_tp_seed: bool = False,
    collision_free: bool = False,
    sizes: Mapping[str, int] | None = None,
) -> SlapoSeeds:
    """Compute slapo's seeds for one rank. Pure. Results wrap modulo ``2**64``.

    With ``collision_free`` (which needs ``sizes``), hwrng's formulas of
    :func:`preset_formulas` instead.
    """
    coordinate = _slapo_coordinate(dp_rank, pp_rank, tp_rank)
    return _slapo(seed, coordinate, always_enable_tp_seed, collision_free, sizes)[0]


_SLAPO_FIX = (
    "slapo's own formula does this on the same layout; to keep the ranks apart, seed with "
    "collision_free=True and sizes={...} (hwrng's formulas: the numbers then differ from "
    "slapo's)"
)


def slapo_set_random_seed(
    seed: int = 2013,
    *,
    dp_rank: int | None = None,
    pp_rank: int | None = None,
    tp_rank: int | None = None,
    always_enable_tp_seed: bool = False,
    collision_free: bool = False,
    sizes: Mapping[str, int] | None = None,
    tracker: RNGStatesTracker | None = None,
    platform: Platform | str | None = None,
) -> int:
    """Seed this rank as slapo's ``set_random_seed`` does, on any platform.

    With a ``tp_rank``, the default device generator gets :attr:`SlapoSeeds.default`
    and ``tracker`` (default: :func:`get_rng_tracker`) is reset to hold
    ``"model-parallel-rng"``. With ``always_enable_tp_seed`` (slapo's option
    for sequence parallelism) that is the tensor-parallel seed, and the plan
    records it (:meth:`~hwrng.Seeding.device_dims`), so :func:`hwrng.verify`
    judges the devices' streams along ``tp`` too -- on the CPU, whose one
    device is torch's CPU generator, that stream is ``torch.cpu``.

    slapo's ``100*pp + 10*dp`` gives ranks one seed from a dp rank of 10
    (``(pp=0, dp=10)`` and ``(pp=1, dp=0)``): as :func:`megatron_manual_seed`,
    such a layout draws an :class:`~hwrng.HwrngWarning`, and
    ``collision_free=True`` (with ``sizes``) seeds with hwrng's formulas
    instead.

    Returns
    -------
    int
        :attr:`SlapoSeeds.seed`, as slapo returns it.
    """
    coordinate = _slapo_coordinate(dp_rank, pp_rank, tp_rank)
    seeds, formulas = _slapo(seed, coordinate, always_enable_tp_seed, collision_free, sizes)
    resolved = platform_in_force(platform)
    resolved.require_available()
    target = tracker if tracker is not None else get_rng_tracker(resolved)
    if seeds.tensor_parallel is not None:
        _check_tracker(target, {MEGATRON_MODEL_PARALLEL_RNG: seeds.tensor_parallel})
    _warn_if_colliding(formulas, seed, coordinate, sizes, _SLAPO_FIX)
    default = formulas[DEFAULT_STREAM]
    dims = [
        SeedDim(d, coordinate[d], default.weight(d), None if sizes is None else sizes.get(d, 1))
        for d in coordinate
    ]
    named: tuple[tuple[str, tuple[str, ...]], ...] = ()
    if tp_rank is not None:  # known: recorded (weight 0) for hwrng.verify to judge named states
        along = formulas[MEGATRON_MODEL_PARALLEL_RNG].along
        named = ((f"{target.name}/{MEGATRON_MODEL_PARALLEL_RNG}", along), (ANY_STATE, along))
        if always_enable_tp_seed:  # the devices take the tensor-parallel seed: recorded
            named += ((DEVICE_STREAMS, along),)
    source = "slapo (collision-free)" if collision_free else "slapo"
    plan = Seeding(check_seed(seed), tuple(dims), resolved.name, source, named=named)
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
