"""``hwrng.verify``: prove at run time that replicas agree and shards differ, pair by pair."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hwrng._collectives import MESSAGE_BYTES, Comm, digest62, digest_of, rank_and_size
from hwrng._mesh import MeshLayout, mesh_tensor
from hwrng._plan import Seeding
from hwrng._platform import Platform
from hwrng._registry import platform_in_force
from hwrng._seeding import current_seeding
from hwrng.verify._arrival import Mismatch, Refused, arrive, refuse
from hwrng.verify._judging import Judged, judging
from hwrng.verify._meshes import IRREGULAR
from hwrng.verify._report import StreamVerdict, VerifyReport
from hwrng.verify._rule import Observation
from hwrng.verify._setup import (
    Agreed,
    agree_on,
    check_arguments,
    check_group,
    comparison_mesh,
    group_problems,
    members_digest,
    name_minority,
    names_message,
    one_message,
    union_of_names,
)
from hwrng.verify._streams import (
    DTENSOR_STREAM,
    SHARDS_DIFFER,
    STATE_PREFIX,
    DTensorView,
    check_stream_names,
    expectation_of,
    keys_for,
    named_apart,
    order,
    rank_streams,
)
from hwrng.verify._timeout import check_timeout, default_timeout
from hwrng.verify._topology import Topology, over_group, over_mesh
from hwrng.verify._wire import drive

if TYPE_CHECKING:
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["verify"]

#: Ranks that broadcast the problems they found, at most (the rest are counted).
SHOWN = 16
#: Plans that record the job's parallel layout rather than a trainer's seed formula.
_LAYOUT_SOURCES = ("manual_seed", "groups")
#: The check after the streams: are any two ranks replicas at all?
_REPLICAS = "(replicas)"
#: What a failed setup expected, and its report's plan: a rank's own failure and a peer's
#: refused call are reported alike.
_BUILDS = "every rank builds its observations"
_SETUP_FAILED = "unknown (setup failed)"


@dataclass(frozen=True)
class _Fingerprint:
    """What this rank contributes: its streams, and what every rank must share."""

    observations: dict[str, tuple[Observation, ...]]
    names: list[str]
    names_message: str
    wanted: int
    replica: int
    plan: int
    plan_words: str
    layout: MeshLayout | None
    groups: list[int]
    seeding: Seeding | None  # the plan the keys came from (None with sharded_dims)
    preset: str | None
    dtensor: DTensorView
    kinds_message: str


def _fingerprint(
    mesh: Any,
    sharded_dims: tuple[str, ...] | None,
    wanted: list[str] | None,
    platform: Platform,
    checked: Sequence[int] | None,
    *,
    plan: Seeding | None,
) -> _Fingerprint:
    """Everything this rank sends; may raise (the caller turns that into a setup failure)."""
    seeding = plan if sharded_dims is None else None
    keys = keys_for(seeding, mesh, sharded_dims)
    streams, view = rank_streams(platform, plan, seeding, keys.replica, mesh)
    held = {s.name: s.observations for s in streams}
    if wanted is not None:
        held = {name: obs for name, obs in held.items() if name in wanted}
    names = sorted(held, key=order)
    groups: list[int] = []
    if seeding is not None and any(d.members is not None for d in seeding.dims):
        inside = set(checked if checked is not None else range(rank_and_size()[1]))
        groups = [
            members_digest(set(d.members) & inside) for d in seeding.dims if d.members is not None
        ]
    preset = None
    if seeding is not None and seeding.source not in _LAYOUT_SOURCES:
        terms = ", ".join(d.name for d in seeding.dims if d.weight) or "none"
        preset = f"the {seeding.source} plan (its terms: {terms})"
    return _Fingerprint(
        held,
        names,
        names_message(names),
        digest_of(wanted),
        keys.replica,
        keys.plan,
        keys.words,
        keys.layout,
        groups,
        seeding,
        preset,
        view,
        _kinds_message(view.kinds),
    )


def _kinds_message(kinds: Sequence[str]) -> str:
    """The kinds of DTensor mesh this rank used, as one broadcast message (refused if longer)."""
    return one_message(
        kinds,
        f"this rank ran DTensor ops on {len(kinds)} kinds of mesh, more than verify can "
        f"tell the others about in one message ({MESSAGE_BYTES} bytes): pass mesh=",
    )


def verify(
    mesh: DeviceMesh | None = None,
    *,
    sharded_dims: Sequence[str] | None = None,
    streams: Iterable[str] | None = None,
    group: dist.ProcessGroup | None = None,
    platform: Platform | str | None = None,
    timeout: float | datetime.timedelta | None = None,
) -> VerifyReport:
    """Check every RNG stream of every rank against the seed plan: every pair of ranks.

    Call it on every rank of ``group`` (a collective). It changes no RNG state:
    streams are read, never drawn from. It never leaves a peer waiting: a rank
    that cannot build its observations (no plan in force, a mesh it is not in,
    ...) still joins the collectives, and every rank gets the same report,
    failing with ``setup failed on rank r: ...``; a rank whose own arguments
    are wrong raises, and tells its peers first, which get that report at
    once. Nor does it wait forever:
    before any collective the ranks meet through the job's rendezvous store,
    and ranks that called it over different groups get a failing report
    naming the mismatch; ranks that do not arrive within ``timeout`` are
    named in the error the others raise (see "Never waiting forever" in the
    documentation).

    Every pair of ranks is judged -- ranks that should be replicas must hold
    equal streams, ranks that should differ must not -- whatever mesh dims
    separate them. With a DeviceMesh over the whole world (``mesh``, or the one
    the plan was made on, while the job holds it) the cost per rank stays set
    by the mesh's dims, never the world: a few fixed-size reductions, and an
    exchange of a few records along each dim some stream varies along (one
    word per rank of that dim). Otherwise the group is judged as one, at a
    cost that grows with it.

    Parameters
    ----------
    mesh
        The DeviceMesh DTensor ops run on (each rank passes its own, e.g. its
        pipeline stage's submesh); ranks are named by their coordinates in it.
        By default the DTensor stream is judged on each mesh the DTensor
        adapter ran random ops on since the plan was made, among the ranks of
        that mesh (each pipeline stage on its own submesh), and ranks are
        named by the plan's mesh.
    sharded_dims
        Dims of ``mesh`` along which ranks should differ, when no plan is in
        force (ranks seeded by other means) or to check another expectation.
        By default the plan's.
    streams
        The stream names to check (see :class:`~hwrng.StreamVerdict`); by
        default every one: torch CPU, each device of the platform, ``random``,
        NumPy, every named state of every live :class:`~hwrng.RNGStatesTracker`,
        and the DTensor stream. A stream some ranks lack (a named state of one
        pipeline stage) is judged among the ranks that hold it.
    group
        The process group to check over; by default the whole world.
    platform
        Whose devices to read; by default the plan's platform, else
        :func:`hwrng.get_platform`'s choice.
    timeout
        Seconds (or a :class:`datetime.timedelta`) to wait for every rank to
        arrive, and for each collective after that -- on the whole group and
        on each mesh dim's group, whatever timeout those groups were made with.
        At most ``1e9`` s. By default the timeout ``group`` was made with
        (``init_process_group(timeout=...)`` for the default group), at most
        5 minutes.

    Returns
    -------
    VerifyReport
        The same report on every rank; ``report.raise_if_failed()`` raises.
        Ranks whose plans differ (seed, terms, preset, platform, mesh shape,
        resume generation), or whose process groups do not match their
        members' groups, fail the ``plan`` check. After a preset that knows
        what its named states differ along (Megatron: the tensor-parallel
        stream along ``pp`` and ``tp``), they are judged so; after one that
        does not, named states are compared only between ranks the plan
        tells apart, and their verdicts say so (``unjudged``).

    Raises
    ------
    DistributedError
        On every rank, before any collective, if ``torch.distributed`` is not
        initialised; on a rank outside ``group`` (which must not call it). On
        every rank that arrived, within ``timeout``, if some rank of the group
        did not (naming it), and on a rank that arrives after the others gave
        up; if a collective does not complete within ``timeout`` (a rank
        stopped inside verify).
    MeshError
        Before any collective, if ``mesh`` is not a DeviceMesh or
        ``sharded_dims`` are malformed or given without a mesh.
    InvalidArgumentError
        Before any collective, if ``streams`` is not a list of distinct names,
        or ``timeout`` is neither seconds nor a timedelta.
    InvalidValueError
        Before any collective, if ``timeout`` is not positive and finite, or
        is beyond ``1e9`` s.
    BackendNotFoundError
        Before any collective, if ``platform`` names no installed backend.

    Each of these four is raised by the rank whose arguments are wrong (on
    every rank, where every rank's are); its peers get a failing report at
    once, ``setup failed on rank r: ...``, naming the first such rank.
    """
    check_group(group)
    seconds = default_timeout(group)
    try:
        dims = check_arguments(mesh, sharded_dims)
        wanted = check_stream_names(streams)
        if timeout is not None:
            seconds = check_timeout(timeout)
        resolved = platform_in_force(platform)
        whole = Comm(group, resolved, timeout=seconds)
    except Exception as error:  # the peers must not wait for this rank: tell them, then raise
        refuse(group, error, seconds)
        raise
    plan = current_seeding()
    stopped = arrive(group, seconds)
    if stopped is not None:
        return _stopped_report(whole, stopped)
    failure = ""
    mine: _Fingerprint | None = None
    comparison = None
    try:
        comparison = comparison_mesh(mesh, group, plan if dims is None else None)
        checked = None if group is None else whole.global_ranks()
        mine = _fingerprint(mesh, dims, wanted, resolved, checked, plan=plan)
    except Exception as error:  # any failure must still reach the collectives
        failure = f"{type(error).__name__}: {error}"
    agreed = agree_on(
        whole,
        mine is None,
        {
            "streams asked": mine.wanted if mine is not None else 0,
            "plan": mine.plan if mine is not None else 0,
            "stream names": digest_of(mine.names) if mine is not None else 0,
            "mesh": _mesh_word(comparison),
            "dtensor meshes": digest_of(mine.dtensor.kinds) if mine is not None else 0,
        },
    )
    layout = mine.layout if mine is not None else None
    fallback = over_group(whole, layout)
    if agreed.failed:
        return _setup_failed(whole, failure if mine is None else None, fallback)
    assert mine is not None  # no rank failed, this one included
    held = _agreed_setup(whole, agreed, mine, wanted, fallback)
    if isinstance(held, StreamVerdict):
        return _report(whole, [held], fallback, mine.plan_words)
    topology = fallback
    if comparison is not None and agreed.same["mesh"]:
        topology = over_mesh(comparison, whole, resolved, layout, timeout=seconds)
    return _judge(whole, topology, mine, *held)


def _agreed_setup(
    whole: Comm, agreed: Agreed, mine: _Fingerprint, wanted: list[str] | None, fallback: Topology
) -> StreamVerdict | tuple[list[str], list[str]]:
    """What every rank must hold alike, checked.

    Returns a failing verdict, or the names of the streams and the kinds of
    DTensor mesh some rank used.
    """
    if not agreed.same["streams asked"]:
        problems, ranks = name_minority(whole, mine.wanted, "the streams asked for", fallback.name)
        return StreamVerdict("setup", "every rank checks the same streams", problems, ranks)
    if not agreed.same["plan"]:
        problems, ranks = name_minority(whole, mine.plan, "the seed plan", fallback.name)
        return StreamVerdict("plan", "every rank holds the same seed plan", problems, ranks)
    if mine.groups:
        found = group_problems(whole, mine.groups, fallback.name)
        if found is not None:
            return StreamVerdict("plan", "every rank holds the same seed plan", *found)
    names = (
        mine.names
        if agreed.same["stream names"]
        else union_of_names(whole, mine.names, mine.names_message)
    )
    missing = [] if isinstance(names, str) or wanted is None else sorted(set(wanted) - set(names))
    if isinstance(names, str) or missing:
        text = names if isinstance(names, str) else f"no rank holds stream(s) {missing}"
        return StreamVerdict("setup", "every stream asked for is held", (text,))
    kinds: list[str] | str = list(mine.dtensor.kinds)
    if not agreed.same["dtensor meshes"]:
        kinds = union_of_names(
            whole,
            mine.dtensor.kinds,
            mine.kinds_message,
            key=str,
            what="sets of DTensor mesh kinds: pass mesh= to judge the DTensor stream on one mesh",
        )
    if isinstance(kinds, str):
        return StreamVerdict("setup", "every DTensor mesh is judged", (kinds,))
    return names, kinds


def _judge(
    whole: Comm, topology: Topology, mine: _Fingerprint, names: list[str], kinds: list[str]
) -> VerifyReport:
    """Judge every stream, the DTensor stream on every mesh of the kinds some rank used."""
    view = mine.dtensor
    members = set(whole.global_ranks()) if whole.group is not None else range(whole.size)
    meshes = sorted({*view.recorded, *view.missing(kinds, members)})
    observations = [
        tuple(view.observe(m) for m in meshes)
        if name == DTENSOR_STREAM
        else mine.observations.get(name, ())
        for name in names
    ]
    replica = Observation(mine.replica, mine.replica, mine.replica)
    seeds = tuple(view.seeds(m) for m in meshes)
    outcome = drive(
        judging([*observations, (replica,), seeds], topology.place, topology.name, shown=SHOWN),
        whole,
        topology.lines,
    )
    verdicts = _stream_verdicts(
        names,
        outcome.judged,
        mine,
        seeds_split=not outcome.judged[-1].ok,
        irregular=IRREGULAR in kinds,
    )
    return _report(whole, verdicts, topology, mine.plan_words)


def _mesh_word(mesh: Any) -> int:
    """A digest of the comparison mesh's dims and ranks (0 for none): every rank must share it."""
    if mesh is None:
        return 0
    shape = repr((tuple(mesh.mesh_dim_names or ()), tuple(mesh.shape))).encode()
    return digest62(shape, mesh_tensor(mesh))


def _stream_verdicts(
    names: list[str],
    judged: list[Judged],
    mine: _Fingerprint,
    *,
    seeds_split: bool,
    irregular: bool,
) -> list[StreamVerdict]:
    replicas_exist = judged[len(names)].compared_equal
    verdicts = []
    for name, found in zip(names, judged, strict=False):
        unjudged = ""
        if name == DTENSOR_STREAM and irregular:
            unjudged = (
                "a rank ran DTensor ops on a mesh whose ranks form no grid of global ranks, "
                "so its members that ran none there (or re-seeded since) could not be found; "
                "pass mesh= to judge every rank on one mesh"
            )
        if (
            expectation_of(name) == SHARDS_DIFFER
            and mine.preset is not None
            and named_apart(name, mine.seeding) is None
            and replicas_exist
        ):
            unjudged = (
                f"ranks that {mine.preset} does not tell apart were not compared, so a "
                "state with one seed on every tensor-parallel rank passes; to judge it, "
                "pass mesh= and sharded_dims= with streams=[this state]"
            )
        problems = found.problems
        if found.hidden:
            problems += (f"... and {found.hidden} more violation(s) not shown",)
        if found.alike and mine.seeding is not None:
            problems += _formula_cause(name, mine.seeding)
        if name == DTENSOR_STREAM and seeds_split and not found.ok:
            problems += (_mesh_seeds_cause(mine.preset),)
        verdicts.append(
            StreamVerdict(
                name,
                expectation_of(name),
                problems,
                found.ranks,
                unjudged,
                replicas_compared=found.compared_equal,
                shards_compared=found.compared_apart,
            )
        )
    return verdicts


def _mesh_seeds_cause(preset: str | None) -> str:
    """Why the ranks of one mesh draw with different seeds."""
    plan = preset if preset is not None else "the seed plan"
    return (
        f"cause: ranks of one mesh take different DTensor seeds from {plan}: it tells its "
        "terms apart only outside a mesh, and a mesh smaller than the job is taken to lie "
        "within one pipeline stage, but this one spans stages (or replicas); run DTensor ops "
        "on meshes within one stage, or seed with hwrng.manual_seed on the job's mesh"
    )


def _formula_cause(name: str, plan: Seeding) -> tuple[str, ...]:
    """A line naming the trainer's formula that gives ranks of ``name`` one seed, if any."""
    from hwrng import presets

    formulas = presets.plan_formulas(plan)
    if not formulas:
        return ()
    stream = name.rpartition("/")[2] if name.startswith(STATE_PREFIX) else presets.DEFAULT_STREAM
    formula = formulas.get(stream)
    if formula is None:
        return ()
    return (
        f"cause: {formula.author}'s formula for {formula.stream}, {formula.describe()}, gives "
        "ranks that should differ one seed on this layout (hwrng plan --preset "
        f"{plan.source} shows which); seed with collision_free=True to keep them apart",
    )


def _report(
    whole: Comm, verdicts: list[StreamVerdict], topology: Topology, plan: str
) -> VerifyReport:
    named = sorted({r for v in verdicts for r in v.ranks})
    coordinates = tuple((r, topology.coordinate(r) or {"rank": r}) for r in named)
    return VerifyReport(
        whole.global_rank(whole.rank), whole.size, tuple(verdicts), coordinates, plan
    )


def _setup_failed(whole: Comm, failure: str | None, topology: Topology) -> VerifyReport:
    """Every rank's report when some rank could not build its observations."""
    (count,) = whole.sum([int(failure is not None)])
    collected = whole.collect_texts(failure, SHOWN)
    ranks = tuple(whole.global_rank(position) for position, _ in collected)
    problems = tuple(
        _failed_on(rank, text) for rank, (_, text) in zip(ranks, collected, strict=True)
    )
    if count > len(collected):
        problems += (f"... and {count - len(collected)} more rank(s) failed",)
    return _setup_report(whole, _BUILDS, problems, ranks, _SETUP_FAILED)


def _stopped_report(whole: Comm, stopped: Mismatch | Refused) -> VerifyReport:
    """Every rank's report when the ranks' calls did not meet: a mismatch, or a refused call."""
    if isinstance(stopped, Refused):
        problem = _failed_on(stopped.rank, stopped.text)
        return _setup_report(whole, _BUILDS, (problem,), (stopped.rank,), _SETUP_FAILED)
    expected = "every rank calls verify over the same group"
    plan = "unknown (the ranks' groups differ)"
    return _setup_report(whole, expected, (stopped.text,), stopped.ranks, plan)


def _failed_on(rank: int, text: str) -> str:
    return f"setup failed on rank {rank}: {text}"


def _setup_report(
    whole: Comm, expected: str, problems: tuple[str, ...], ranks: tuple[int, ...], plan: str
) -> VerifyReport:
    """Every rank's report of one failing ``setup`` verdict, which names ``ranks``."""
    verdict = StreamVerdict("setup", expected, problems, ranks)
    named = tuple((r, {"rank": r}) for r in ranks)
    return VerifyReport(whole.global_rank(whole.rank), whole.size, (verdict,), named, plan)
