"""``RNGState``: every rank's RNG state in a checkpoint, at a cost per rank that does not grow.

DCP's rule is that values which differ per rank take keys of their own, and
equal keys hold equal values. So :meth:`RNGState.state_dict` returns, on rank
``r``, two keys (layout :data:`DCP_FORMAT`):

``"job"`` (:data:`JOB_KEY`)
    A few hundred bytes, the same on every rank -- DCP writes one copy: the
    layout, the world size, the job's seed plan (its seed, terms and mesh
    shape, without any rank's coordinates), the furthest DTensor position any
    rank reached on its plan stream, and a nonce that ties the save together.
``"rank_<r>"`` (:func:`rank_key`)
    Rank ``r``'s :func:`hwrng.state_dict`, with the nonce: written and read
    by rank ``r`` alone.

Saving agrees on the shared entry with one ``all_reduce`` of a few words
(ranks that would write different shared entries are refused, named); loading
reaches one verdict on every rank with one more -- all restore, all re-derive
(``on_mismatch="reseed"``) or all refuse -- and broadcasts one message only when
some rank must explain a refusal or a re-derivation. Nothing else crosses
ranks, so each rank holds, writes, reads and sends the same whatever the
world size.

What DCP loads into has the same keys whatever the loading process did before
(seeded otherwise, not at all, another mesh). A value DCP did not fill comes
back as the very object this instance returned, which is refused (or, for
this rank's own entry in a grown world, re-derived under ``reseed``), never
"restored". A rank of a grown world has no key in the checkpoint: DCP's
default planner stops at the missing key; :class:`hwrng.RNGLoadPlanner` lets
the load go on so that the new ranks re-derive.

A checkpoint that one rank writes alone (Lightning, Fabric, accelerate:
``torch.save`` of rank 0's dict) cannot hold the other ranks' keys: give
:class:`RNGState` a ``directory`` and each rank writes its own entry there as
``rank-<r>.pt`` (atomically), while the trainer's file holds the shared entry.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hwrng._checkpoint import (
    OnMismatch,
    _carry_out,
    _check_on_mismatch,
    _checked_plan,
    _from_bytes,
    _plan_fresh,
    _plan_reseed,
    _Reseed,
    _Restore,
    _to_bytes,
    _verdict,
    _write_atomically,
    state_dict,
)
from hwrng._collectives import Comm, digest62, digest_of, rank_and_size
from hwrng._exceptions import CheckpointError
from hwrng._plan import SeedDim, Seeding
from hwrng._platform import Platform
from hwrng._registry import resolve_platform

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["DCP_FORMAT", "JOB_KEY", "OLD_LAYOUT_KEY", "RNGState", "rank_file", "rank_key"]

#: The layout of the entries :class:`RNGState` writes and reads.
DCP_FORMAT = 2
#: The key of the entry every rank shares.
JOB_KEY = "job"
#: The one key of layout 1 (every rank's state in one value), which this hwrng refuses.
OLD_LAYOUT_KEY = "ranks"

_RESTORE, _RESEED, _REFUSE = 0, 1, 2


def rank_key(rank: int) -> str:
    """The key of rank ``rank``'s own entry: ``"rank_<rank>"``."""
    return f"rank_{rank}"


def rank_file(directory: str | os.PathLike[str], rank: int) -> str:
    """Where rank ``rank`` writes its own entry when :class:`RNGState` has a ``directory``."""
    return os.path.join(os.fspath(directory), f"rank-{rank}.pt")


# id(value) -> the RNGState that returned it, so that RNGLoadPlanner can tell hwrng's entries
_issued: dict[int, weakref.ref[RNGState]] = {}


def owner_of(value: object) -> RNGState | None:
    """The :class:`RNGState` whose last ``state_dict()`` returned ``value`` (not a copy)."""
    ref = _issued.get(id(value))
    state = ref() if ref is not None else None
    if state is None or not any(v is value for v in state._issued.values()):
        return None
    return state


def _job_plan(plan: Seeding | None) -> dict[str, Any] | None:
    """The job's plan: the same on every rank (no coordinates, no mesh ranks, no members)."""
    if plan is None:
        return None
    layout = plan.layout
    job = Seeding(
        plan.seed,
        tuple(SeedDim(d.name, 0, d.weight, d.size) for d in plan.dims),
        plan.platform,
        plan.source,
        None if layout is None else type(layout)(layout.names, layout.shape),
        plan.generation,
        plan.named,
    )
    return job.to_dict()


@dataclass(frozen=True)
class _Job:
    """The shared entry, checked."""

    world_size: int
    nonce: int
    plan: Seeding | None
    position: int


def _unpack_job(value: object) -> _Job:
    if not isinstance(value, bytes):
        raise CheckpointError(
            f"the checkpoint's hwrng entry is {type(value).__name__}, not the bytes "
            "hwrng.RNGState saves (written by another hwrng, or not by RNGState)"
        )
    entry = _from_bytes(value, "the checkpoint's hwrng entry")
    if not isinstance(entry, Mapping) or entry.get("format") != DCP_FORMAT:
        found = entry.get("format") if isinstance(entry, Mapping) else type(entry).__name__
        raise CheckpointError(
            f"the checkpoint's hwrng entry has layout {found!r}; this hwrng reads layout "
            f"{DCP_FORMAT}"
        )
    world_size, nonce, position = (entry.get(k) for k in ("world_size", "nonce", "position"))
    if not all(isinstance(v, int) and v >= 0 for v in (world_size, nonce, position)) or (
        world_size < 1  # type: ignore[operator]
    ):
        raise CheckpointError(
            "corrupt hwrng entry: its world size, nonce and position must be counts"
        )
    plan = _checked_plan(entry.get("plan"))
    return _Job(world_size, nonce, plan, position)  # type: ignore[arg-type]


def _old_layout(where: str) -> CheckpointError:
    return CheckpointError(
        f"{where} holds hwrng's RNG entry in layout 1 (one key, {OLD_LAYOUT_KEY!r}, with every "
        f"rank's state), which this hwrng does not read: it reads layout {DCP_FORMAT} "
        f"({JOB_KEY!r} and one 'rank_<r>' key per rank). Resume from a checkpoint written by "
        "this hwrng"
    )


def _plan_position(platform: Platform) -> int:
    """How far this rank's default device generator has gone on the plan's stream."""
    from hwrng._seeding import current_seeding

    plan = current_seeding()
    if plan is None:
        return 0
    seed, offset = platform.counter.peek(platform.generator())
    return offset if seed == plan.rank_seed else 0


@dataclass
class _Local:
    """One rank's side of the load vote."""

    code: int
    verdict: _Restore | _Reseed | None
    why: str
    fallback: _Reseed | None  # the job-wide re-derivation, from the shared entry
    cannot_reseed: str | None  # why this rank could not re-derive, if it could not
    digest: int = 0  # of the shared entry it read
    cause: BaseException | None = None


class RNGState:
    """Every rank's RNG state in a ``torch.distributed.checkpoint`` (DCP) checkpoint.

    Implements DCP's ``Stateful`` protocol: put one in the state dict you save
    and load, next to the model and optimizer::

        state = {"model": model_state, "optim": optim_state, "rng": hwrng.RNGState()}
        dcp.save(state, checkpoint_id=path)
        ...
        dcp.load(state, checkpoint_id=path)  # each rank gets its own streams back

    Each rank's state goes under a key of its own (``rank_<r>``), written and
    read by that rank alone, beside one small entry the same on every rank
    (``job``): what a rank holds, writes, reads and sends does not grow with
    the world (see the module notes). Saving and loading each run one
    ``all_reduce`` of a few words over the default process group (every rank
    must take part, as DCP requires anyway).

    On load, every rank reaches the same verdict: all restore their own
    streams bit for bit; or, under ``on_mismatch="reseed"`` when the world
    size, mesh or any rank's state does not match, all re-derive their
    streams from the saved plan as its next resume generation; or all refuse
    with a :class:`~hwrng.CheckpointError` (naming the rank and why),
    changing nothing.

    Supported DCP options: the default planners, ``dedup_save_to_lowest_rank``,
    ``allow_partial_load`` and ``async_save`` (the state is the one at the
    call). Load a checkpoint of a *smaller* world with
    ``planner=hwrng.RNGLoadPlanner()``, so that the new ranks, which have no
    key in it, re-derive. A load planner with ``flatten_state_dict=False``
    does not hand a ``Stateful`` what it read, so that load is refused; a
    save planner with ``flatten_state_dict=False`` keeps one rank's entry,
    and every load of it is refused.

    A checkpoint that rank 0 writes alone (Lightning's Trainer and Fabric,
    accelerate: the integrations in :mod:`hwrng.integrations` do this)
    needs ``directory``: each rank then writes its own entry there, and the
    trainer's file holds the shared entry; every rank loads the trainer's
    file and calls :meth:`load_state_dict` (or :meth:`check`).

    For an in-memory snapshot without a checkpoint, use :func:`hwrng.state_dict`
    and :func:`hwrng.load_state_dict`: handing this object back the very dict
    its last :meth:`state_dict` returned reads as an entry that was not filled.

    Parameters
    ----------
    on_mismatch, mesh, platform
        As for :func:`hwrng.load_state_dict`.
    directory
        Where each rank writes and reads its own entry (``rank-<r>.pt``), for
        checkpoints that one rank writes alone; ``None`` for DCP.
    """

    def __init__(
        self,
        *,
        on_mismatch: OnMismatch = "error",
        mesh: DeviceMesh | None = None,
        platform: Platform | str | None = None,
        directory: str | os.PathLike[str] | None = None,
    ) -> None:
        _check_on_mismatch(on_mismatch)
        self.on_mismatch: OnMismatch = on_mismatch
        self.mesh = mesh
        self.platform = platform
        self.directory = directory
        self._issued: dict[str, bytes] = {}
        self._missing: set[str] = set()  # keys RNGLoadPlanner found absent from the checkpoint
        self._old_layout = False  # RNGLoadPlanner found layout 1 in the checkpoint

    def state_dict(self) -> dict[str, Any]:
        """The shared entry and this rank's own (DCP calls this to save, and to load into).

        With a ``directory``, this rank's entry is written there instead.

        Raises
        ------
        CheckpointError
            On every rank, when any rank cannot take its state (inside a fork)
            or ranks would write different shared entries (different plans).
        """
        rank, world_size = rank_and_size()
        platform = resolve_platform(self.platform)
        comm = Comm(None, platform)
        failure: str | None = None
        job_plan: dict[str, Any] | None = None
        try:
            document = state_dict(self.platform)
            job_plan = _job_plan(_checked_plan(document.get("plan")))
            own_position = _plan_position(platform)
        except CheckpointError as error:  # tell the others, or they wait for this rank
            failure, own_position = str(error), 0
        job_digest = digest_of(world_size, job_plan)
        nonce = int.from_bytes(os.urandom(8), "little") % (2**62)  # moves no RNG stream
        words = comm.max(
            [int(failure is not None), job_digest, nonce, own_position],
            negated=[job_digest, rank if failure is not None else world_size],
        )
        if words[0]:
            first = words[5]
            why = comm.broadcast_text(failure or "", first)
            raise CheckpointError(f"rank {first} cannot take its RNG state: {why}")
        if words[1] != words[4]:
            positions, total = comm.odd_ones(job_digest, 16)
            more = f" and {total - len(positions)} more" if total > len(positions) else ""
            raise CheckpointError(
                "ranks would write different shared hwrng entries (their seed plans, meshes or "
                f"platforms differ): ranks {positions}{more} differ from most; seed every rank "
                "with one plan before saving"
            )
        job = _to_bytes(
            {
                "format": DCP_FORMAT,
                "world_size": world_size,
                "nonce": words[2],
                "plan": job_plan,
                "position": words[3],
            }
        )
        entry = _to_bytes({"nonce": words[2], "state": document})
        issued = {JOB_KEY: job}
        if self.directory is None:
            issued[rank_key(rank)] = entry
        else:
            self._write_own(comm, rank, world_size, entry)
        self._issued = issued
        self._missing = set()
        self._old_layout = False
        for value in issued.values():
            _issued[id(value)] = weakref.ref(self)
        for key in [k for k, ref in _issued.items() if ref() is None]:
            del _issued[key]
        return dict(issued)

    def _write_own(self, comm: Comm, rank: int, world_size: int, entry: bytes) -> None:
        """Write this rank's entry into ``directory``; when any rank cannot, every rank raises.

        One more reduction of two words: without it, the ranks whose writes
        went through would wait for the failed one in the trainer's next
        collective.
        """
        assert self.directory is not None
        failure: str | None = None
        try:
            os.makedirs(self.directory, exist_ok=True)
            _write_atomically(rank_file(self.directory, rank), entry)
        except (OSError, CheckpointError) as error:
            failure = str(error)
        failed, first = comm.max(
            [int(failure is not None)], negated=[rank if failure is not None else world_size]
        )
        if failed:
            why = comm.broadcast_text(failure or "", first)
            raise CheckpointError(f"rank {first} could not write its RNG entry: {why}")

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore, re-derive or refuse on every rank alike (see the class notes)."""
        self.check(state_dict)()

    def check(self, state_dict: Mapping[str, Any]) -> Callable[[], None]:
        """Agree with every rank on what loading ``state_dict`` does; change nothing yet.

        :meth:`load_state_dict` in two steps, for a trainer that must read
        its checkpoint before the moment the streams should come back (the
        Lightning callback checks in ``load_state_dict`` and restores when
        training starts). This step is the collective: every rank must call
        it with its copy of the entry, and every rank gets the same verdict,
        so either every rank returns or every rank raises.

        Returns
        -------
        Callable[[], None]
            Carries out the agreed verdict on this rank: restores its streams
            bit for bit, or re-derives them (and warns). It runs no collective
            and checks nothing more: call it on every rank at the same point
            of the job (each rank changes only its own streams), before
            anything else reseeds or restores them.

        Raises
        ------
        CheckpointError
            On every rank when any rank refuses (naming that rank and why),
            before any rank changes anything.
        """
        rank, world_size = rank_and_size()
        platform = resolve_platform(self.platform)
        comm = Comm(None, platform)
        local = self._local_verdict(state_dict, rank, world_size, platform)
        reseeding = local.code == _RESEED
        words = comm.max(
            [local.code, local.digest],
            negated=[
                local.digest,
                rank if local.code == _REFUSE else world_size,
                rank if reseeding else world_size,
                rank if local.fallback is None else world_size,
            ],
        )
        code, refuser, reseeder, cannot = words[0], words[3], words[4], words[5]
        if code == _REFUSE:
            why = comm.broadcast_text(local.why, refuser)
            if local.code == _REFUSE:
                raise CheckpointError(local.why) from local.cause
            raise CheckpointError(
                f"rank {refuser} refused to restore its RNG state, so no rank did: {why}"
            )
        if words[1] != words[2]:
            positions, total = comm.odd_ones(local.digest, 16)
            more = f" and {total - len(positions)} more" if total > len(positions) else ""
            raise CheckpointError(
                "the ranks read different shared hwrng entries (from different checkpoints?): "
                f"ranks {positions}{more} differ from most, so no rank changed anything"
            )
        if code == _RESTORE and isinstance(local.verdict, _Restore):
            return functools.partial(_carry_out, local.verdict, platform, self.mesh)
        why = comm.broadcast_text(local.why, reseeder)
        if cannot < world_size:
            cannot_why = comm.broadcast_text(local.cannot_reseed or "", cannot)
            raise CheckpointError(
                f"rank {reseeder} must re-derive its streams ({why}), but rank {cannot} "
                f"cannot ({cannot_why}), so no rank changed anything"
            )
        assert local.fallback is not None  # no rank is unable to re-derive, this one included
        local.fallback.why = local.why if reseeding else f"rank {reseeder}: {why}"
        return functools.partial(_carry_out, local.fallback, platform, self.mesh)

    def _without_own(
        self,
        job: _Job,
        own: bytes | None,
        where: str,
        *,
        rank: int,
        world_size: int,
        platform: Platform,
    ) -> tuple[_Reseed | None, str | None, _Local | None]:
        """The job-wide re-derivation, why not, and the vote when this rank cannot restore."""
        fallback: _Reseed | None = None
        cannot: str | None = "it was loaded with on_mismatch='error'"
        why = f"the checkpoint was written by {job.world_size} rank(s) (here {world_size})"
        if job.world_size == world_size and own is None:
            why = f"the checkpoint holds no RNG state for rank {rank} ({where})"
        if self.on_mismatch == "reseed":
            try:
                fallback = _plan_reseed(job.plan, job.position, self.mesh, platform, why)
                cannot = None
            except CheckpointError as error:
                cannot = str(error)
        if job.world_size == world_size and own is not None:
            return fallback, cannot, None
        if fallback is None:
            advice = (
                "load with RNGState(on_mismatch='reseed', mesh=new_mesh) to re-derive the streams"
                if self.on_mismatch == "error"
                else f"and it cannot be re-derived: {cannot}"
            )
            why = f"refusing to restore the RNG state: {why}; {advice}"
            return None, cannot, _Local(_REFUSE, None, why, None, cannot)
        return fallback, cannot, _Local(_RESEED, fallback, why, fallback, None)

    def _no_entry(self) -> _Local:
        """The vote of a rank whose checkpoint holds no hwrng entry at all."""
        why = "the checkpoint holds no hwrng entry: it was written without hwrng.RNGState"
        if self.on_mismatch == "error":
            text = (
                f"refusing to go on from the seed: {why}, and every RNG stream would restart "
                "from its seed, repeating the saved job's draws; load with "
                "on_mismatch='reseed' to start new streams instead"
            )
            return _Local(_REFUSE, None, text, None, "it was loaded with on_mismatch='error'")
        try:
            fresh = _plan_fresh(why)
        except CheckpointError as error:
            return _Local(_REFUSE, None, str(error), None, str(error))
        return _Local(_RESEED, fresh, why, fresh, None)

    def _is_issued(self, value: object) -> bool:
        return any(value is issued for issued in self._issued.values())

    def _own_entry(self, loaded: Mapping[str, Any], rank: int) -> tuple[bytes | None, str]:
        """The own entry of this rank (``None``: absent or not filled), and where it was sought."""
        key = rank_key(rank)
        if self.directory is not None and key not in loaded:
            path = rank_file(self.directory, rank)
            try:
                with open(path, "rb") as file:
                    return file.read(), repr(path)
            except FileNotFoundError:
                return None, f"no file {path!r}"
            except OSError as error:
                raise CheckpointError(
                    f"cannot read this rank's RNG entry {path!r}: {error}"
                ) from None
        value = loaded.get(key)
        if value is None or self._is_issued(value):
            return None, f"no key {key!r}"
        if not isinstance(value, bytes):
            raise CheckpointError(
                f"corrupt hwrng entry: {key!r} is {type(value).__name__}, not bytes"
            )
        return value, repr(key)

    def _local_verdict(
        self, loaded: Mapping[str, Any], rank: int, world_size: int, platform: Platform
    ) -> _Local:
        """The verdict of this rank, and the job-wide re-derivation should any rank need one."""
        fallback: _Reseed | None = None
        cannot: str | None = "it was loaded with on_mismatch='error'"
        digest = 0
        try:
            if not isinstance(loaded, Mapping):
                raise CheckpointError(
                    f"an hwrng entry is a mapping (from RNGState.state_dict), got "
                    f"{type(loaded).__name__}"
                )
            if self._old_layout or (OLD_LAYOUT_KEY in loaded and JOB_KEY not in loaded):
                raise _old_layout("the checkpoint")
            value = loaded.get(JOB_KEY)
            if JOB_KEY in self._missing or (value is None and JOB_KEY not in loaded):
                return self._no_entry()
            if value is None or self._is_issued(value):
                raise CheckpointError(
                    "DCP did not fill hwrng's entry, so there is nothing to restore: a load "
                    "planner with flatten_state_dict=False does not hand a Stateful what it "
                    "read (hwrng refuses that option), and allow_partial_load skips an entry "
                    "the checkpoint lacks"
                )
            job = _unpack_job(value)
            digest = digest62(value)
            own, where = self._own_entry(loaded, rank)
            fallback, cannot, early = self._without_own(
                job, own, where, rank=rank, world_size=world_size, platform=platform
            )
            if early is not None:
                return dataclasses.replace(early, digest=digest)
            assert own is not None
            entry = _from_bytes(own, f"the RNG entry of rank {rank} ({where})")
            if not isinstance(entry, Mapping) or entry.get("nonce") != job.nonce:
                raise CheckpointError(
                    f"the RNG entry of rank {rank} ({where}) was not written by the save that "
                    "wrote the shared entry (a checkpoint put together from two saves?)"
                )
            verdict = _verdict(entry.get("state"), self.on_mismatch, self.mesh, platform)
        except Exception as error:
            cause = None if isinstance(error, CheckpointError) else error
            text = str(error) if cause is None else repr(error)
            return _Local(_REFUSE, None, text, fallback, cannot, digest, cause)
        if isinstance(verdict, _Reseed):  # this rank's state does not fit: all re-derive
            if fallback is None:
                return _Local(_REFUSE, None, f"cannot re-derive: {cannot}", None, cannot, digest)
            return _Local(_RESEED, fallback, verdict.why, fallback, None, digest)
        return _Local(_RESTORE, verdict, "", fallback, cannot, digest)
