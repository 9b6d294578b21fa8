"""``RNGState``: every rank's RNG state in a checkpoint, at a cost per rank that does not grow.

DCP's rule is that values which differ per rank take keys of their own, and
equal keys hold equal values. So :meth:`RNGState.state_dict` returns, on rank
``r``, two keys (layout :data:`~hwrng.checkpoint._job.DCP_FORMAT`): ``"job"``,
a few hundred bytes the same on every rank (``_job``), and ``"rank_<r>"``,
rank ``r``'s :func:`hwrng.state_dict` with the save's nonce, written and read
by rank ``r`` alone. Both are sealed (``_files``): a torn or altered entry is
refused, never loaded.

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
:class:`RNGState` a ``directory`` and each rank writes its own entry into a
new set of files per save (``_sets``), while the trainer's file holds the
shared entry, which names the set; :meth:`RNGState.commit` lets go the sets
no file names once the trainer's file is complete (``_commit``).
"""

from __future__ import annotations

import functools
import os
import warnings
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hwrng._collectives import Comm, digest62, digest_of, rank_and_size
from hwrng._exceptions import CheckpointError, HwrngWarning
from hwrng._platform import Platform
from hwrng._registry import platform_in_force
from hwrng._seeding import current_seeding
from hwrng.checkpoint._capture import state_dict
from hwrng.checkpoint._checks import OnMismatch, Restore, check_on_mismatch, checked_plan, verdict
from hwrng.checkpoint._commit import Decision, agree, choose, pause_at_decision
from hwrng.checkpoint._files import seal, unseal
from hwrng.checkpoint._job import (
    JOB_KEY,
    OLD_LAYOUT_KEY,
    Job,
    job_plan,
    old_layout,
    pack_job,
    rank_key,
    unpack_job,
)
from hwrng.checkpoint._reseed import Reseed, plan_fresh, plan_reseed
from hwrng.checkpoint._restore import carry_out
from hwrng.checkpoint._sets import (
    beside,
    folder_name,
    has_own,
    rank_file,
    read_own,
    remove_retired,
    retire_sets,
    write_own,
)

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["RNGState", "owner_of"]

_RESTORE, _RESEED, _REFUSE = 0, 1, 2

#: What a refusal of a rank's missing or unusable state tells the user to do.
_REMEDY = (
    "resume from another checkpoint, or load with on_mismatch='reseed' (RNGState, or the "
    "integration's on_mismatch=; with the new mesh= on a mesh) to re-derive every rank's "
    "streams from the saved seed plan instead of restoring them"
)

# id(value) -> the RNGState that returned it, so that RNGLoadPlanner can tell hwrng's entries
_issued: dict[int, weakref.ref[RNGState]] = {}


def owner_of(value: object) -> RNGState | None:
    """The :class:`RNGState` whose last ``state_dict()`` returned ``value`` (not a copy)."""
    ref = _issued.get(id(value))
    state = ref() if ref is not None else None
    if state is None or not state.issued(value):
        return None
    return state


def _plan_position(platform: Platform) -> int:
    """How far this rank's default device generator has gone on the plan's stream."""
    plan = current_seeding()
    if plan is None:
        return 0
    seed, offset = platform.counter.peek(platform.generator())
    return offset if seed == plan.rank_seed else 0


@dataclass
class _Local:
    """One rank's side of the load vote."""

    code: int
    verdict: Restore | Reseed | None
    why: str
    fallback: Reseed | None  # the job-wide re-derivation, from the shared entry
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
    the world. Saving and loading each run one ``all_reduce`` of a few words
    over the default process group (every rank must take part, as DCP
    requires anyway). Save each DCP checkpoint to a new directory: DCP
    rewrites a directory's files in place, and a checkpoint saved over and
    interrupted is refused (its ranks' entries come from two saves).

    On load, every rank reaches the same verdict: all restore their own
    streams bit for bit; or, under ``on_mismatch="reseed"`` when the world
    size, mesh or any rank's state does not match (or a rank's state is
    missing or damaged), all re-derive their streams from the saved plan as
    its next resume generation; or all refuse with a
    :class:`~hwrng.CheckpointError` (naming the rank, the file or key, and
    what to do), changing nothing.

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
    needs ``directory``: each save then writes every rank's own entry into a
    new set there, ``<directory>/save-<nonce>/rank-<r>.pt``, never over a
    file an earlier checkpoint names, and the trainer's file holds the shared
    entry, which names the set. Once the trainer's file is complete, call
    :meth:`commit` on every rank to let go the sets no file names. Every
    rank loads the trainer's file and calls :meth:`load_state_dict` (or
    :meth:`check`).

    For an in-memory snapshot without a checkpoint, use :func:`hwrng.state_dict`
    and :func:`hwrng.load_state_dict`: handing this object back the very dict
    its last :meth:`state_dict` returned reads as an entry that was not filled.

    Parameters
    ----------
    on_mismatch, mesh, platform
        As for :func:`hwrng.load_state_dict`; ``on_mismatch="reseed"`` also
        re-derives every rank's streams when a rank's own state is missing
        or damaged.
    directory
        Where each rank writes and reads its own entry, one set of files per
        save, for checkpoints that one rank writes alone; ``None`` for DCP.
    """

    def __init__(
        self,
        *,
        on_mismatch: OnMismatch = "error",
        mesh: DeviceMesh | None = None,
        platform: Platform | str | None = None,
        directory: str | os.PathLike[str] | None = None,
    ) -> None:
        check_on_mismatch(on_mismatch)
        self.on_mismatch: OnMismatch = on_mismatch
        self.mesh = mesh
        self.platform = platform
        self.directory = directory
        self._issued: dict[str, bytes] = {}
        self._saved: tuple[str, int, bytes] | None = None  # (directory, nonce, entry) to commit
        self._own: dict[str, list[int]] = {}  # directory -> this object's sets there, oldest first
        self.missing: set[str] = set()  # keys RNGLoadPlanner found absent from the checkpoint
        self.old_layout = False  # RNGLoadPlanner found layout 1 in the checkpoint

    def issued(self, value: object) -> bool:
        """Whether ``value`` is one of the objects the last :meth:`state_dict` returned."""
        return any(value is issued for issued in self._issued.values())

    def state_dict(self) -> dict[str, Any]:
        """The shared entry and this rank's own (DCP calls this to save, and to load into).

        With a ``directory``, this rank's entry is written there instead, into
        a new set of files named by this save's nonce.

        Raises
        ------
        CheckpointError
            On every rank, when any rank cannot take its state (inside a fork),
            ranks would write different shared entries (different plans), or
            any rank cannot write its file into ``directory``.
        """
        rank, world_size = rank_and_size()
        platform = platform_in_force(self.platform)
        comm = Comm(None, platform)
        failure: str | None = None
        plan: dict[str, Any] | None = None
        try:
            document = state_dict(platform)
            plan = job_plan(checked_plan(document.get("plan")))
            own_position = _plan_position(platform)
        except CheckpointError as error:  # tell the others, or they wait for this rank
            failure, own_position = str(error), 0
        job_digest = digest_of(world_size, plan)
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
        nonce = words[2]
        folder = None if self.directory is None else folder_name(self.directory)
        job = pack_job(world_size, nonce, plan, words[3], folder)
        entry = seal({"nonce": nonce, "state": document})
        issued = {JOB_KEY: job}
        if self.directory is None:
            issued[rank_key(rank)] = entry
        else:
            self._write_own(comm, rank, world_size, nonce, entry)
        self._issued = issued
        self.missing = set()
        self.old_layout = False
        for value in issued.values():
            _issued[id(value)] = weakref.ref(self)
        for key in [k for k, ref in _issued.items() if ref() is None]:
            del _issued[key]
        return dict(issued)

    def _write_own(self, comm: Comm, rank: int, world_size: int, nonce: int, entry: bytes) -> None:
        """Write this rank's entry into a new set; when any rank cannot, every rank raises.

        One more reduction of two words: without it, the ranks whose writes
        went through would wait for the failed one in the trainer's next
        collective.
        """
        assert self.directory is not None
        directory = os.fspath(self.directory)
        failure: str | None = None
        try:
            write_own(directory, nonce, rank, entry)
        except (OSError, CheckpointError) as error:
            failure = str(error)
        failed, first = comm.max(
            [int(failure is not None)], negated=[rank if failure is not None else world_size]
        )
        if failed:
            why = comm.broadcast_text(failure or "", first)
            raise CheckpointError(f"rank {first} could not write its RNG entry: {why}")
        self._saved = (directory, nonce, entry)
        self._own.setdefault(directory, []).append(nonce)

    def commit(self, checkpoint: str | os.PathLike[str] | None = None) -> None:
        """Say the trainer's write of the last save returned: let go the sets no file names.

        A collective (one ``all_reduce`` of eight words, which also makes every
        rank wait for the trainer's write): call it on every rank once the
        trainer's write of the file that holds the shared entry of the last
        :meth:`state_dict` has returned -- after ``fabric.save``, after rank
        0's ``torch.save`` and a barrier -- as the integrations do. Until then
        every set is kept, so that a save that fails or is cut short at any
        point leaves whole the checkpoint the trainer still holds.

        The retention rule (rank 0 decides, every rank acts on its own files):
        a set stays while a file in reach names it -- the trainer's file, a
        copy of it, any file in the folder that holds ``directory`` or beside
        ``checkpoint`` -- and so do this object's own sets newer than the
        newest one a file names (writes still on their way). Every other set
        goes in two steps: this commit *retires* it (renamed out of sight,
        still loadable), and a later commit removes it, every file of it,
        whatever ranks are missing, if its read -- made after the set was
        retired -- still finds no file naming it. The files are read now,
        after the write, so an asynchronous write not yet done, a second run
        whose newer file landed on the same path, a second trainer's file in
        the same directory and a copy keep their sets. This rank's own file of
        the last save, if another run retired it meanwhile, is written again;
        a file that cannot be told (a storage error) keeps every set, with a
        warning.

        Nothing happens (and nothing is communicated) without a ``directory``
        (DCP: nothing to remove), or when no :meth:`state_dict` has written a
        set since the last commit (every rank alike: saving is collective).

        Parameters
        ----------
        checkpoint
            The trainer's file of the last save (a path or fsspec URL), read
            first; it and the files beside it are in reach, as well as every
            file in the folder that holds ``directory`` (``trainer.pt`` beside
            ``trainer.pt.hwrng``). Pass it when the trainer's files are kept
            elsewhere.
        """
        if self.directory is None or self._saved is None:
            return
        directory, nonce, entry = self._saved
        self._saved = None
        rank, world_size = rank_and_size()
        comm = Comm(None, platform_in_force(self.platform))
        own = self._own.get(directory, [])
        decided = choose(directory, checkpoint, own) if rank == 0 else Decision()
        pause_at_decision()
        decision = agree(comm, decided)
        gone = {*decision.retire, *(n for n, _ in decision.remove)}
        self._own[directory] = [n for n in own if n not in gone]
        retire_sets(directory, decision.retire, nonce, rank, world_size)
        remove_retired(directory, decision.remove, rank, world_size)
        try:
            if not has_own(directory, nonce, rank):  # retired by another run meanwhile
                write_own(directory, nonce, rank, entry)
        except (OSError, CheckpointError) as error:  # after the collective: warn, never hang
            warnings.warn(
                f"hwrng: rank {rank}'s RNG file of the last save was retired (by another run "
                f"saving to the same place?) and could not be written again: {error}; loading "
                "that checkpoint will be refused on every rank, naming it",
                HwrngWarning,
                stacklevel=2,
            )

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
        platform = platform_in_force(self.platform)
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
        if code == _RESTORE and isinstance(local.verdict, Restore):
            return functools.partial(carry_out, local.verdict, platform, self.mesh)
        why = comm.broadcast_text(local.why, reseeder)
        if cannot < world_size:
            cannot_why = comm.broadcast_text(local.cannot_reseed or "", cannot)
            raise CheckpointError(
                f"rank {reseeder} must re-derive its streams ({why}), but rank {cannot} "
                f"cannot ({cannot_why}), so no rank changed anything"
            )
        assert local.fallback is not None  # no rank is unable to re-derive, this one included
        local.fallback.why = local.why if reseeding else f"rank {reseeder}: {why}"
        return functools.partial(carry_out, local.fallback, platform, self.mesh)

    def _no_entry(self) -> _Local:
        """The vote of a rank whose checkpoint holds no hwrng entry at all."""
        why = (
            "the checkpoint holds no hwrng entry: it was written without hwrng.RNGState (or "
            "its save did not finish)"
        )
        if self.on_mismatch == "error":
            text = (
                f"refusing to go on from the seed: {why}, and every RNG stream would restart "
                "from its seed, repeating the saved job's draws; load with "
                "on_mismatch='reseed' to start new streams instead"
            )
            return _Local(_REFUSE, None, text, None, "it was loaded with on_mismatch='error'")
        try:
            fresh = plan_fresh(why)
        except CheckpointError as error:
            return _Local(_REFUSE, None, str(error), None, str(error))
        return _Local(_RESEED, fresh, why, fresh, None)

    def _own_blob(self, loaded: Mapping[str, Any], rank: int, job: Job) -> tuple[Any, str, str]:
        """Find this rank's own entry (``None``: absent), where it was sought, why it is absent.

        With a ``directory``, the file is sought there, then in the folder the
        shared entry names beside it: a trainer's file copied under another
        name (a link followed by ``cp -L``) finds the set it names next to itself.
        """
        key = rank_key(rank)
        if self.directory is None or key in loaded:
            value = loaded.get(key)
            where = f"key {key!r}"
            blob = None if value is None or self.issued(value) else value
            return blob, where, f"the checkpoint holds no RNG state for rank {rank} (no {where})"
        places = [os.fspath(self.directory)]
        if job.folder is not None and job.folder != folder_name(self.directory):
            places.append(beside(self.directory, job.folder))
        for place in places:
            where = f"file {rank_file(place, job.nonce, rank)!r}"
            try:
                blob = read_own(place, job.nonce, rank)
            except CheckpointError as error:  # not a regular file: refused unopened
                return None, where, str(error)
            except OSError as error:
                raise CheckpointError(
                    f"cannot read rank {rank}'s RNG state ({where}): {error}"
                ) from None
            if blob is not None:
                return blob, where, ""
        sought = " or ".join(rank_file(place, job.nonce, rank) for place in places)
        return None, sought, f"the checkpoint holds no RNG state for rank {rank} (no file {sought})"

    def _own_entry(self, loaded: Mapping[str, Any], rank: int, job: Job) -> tuple[Any, str]:
        """Find this rank's state of the save ``job`` names: it, or ``None`` and why not."""
        blob, where, absent = self._own_blob(loaded, rank, job)
        if blob is None:
            return None, absent
        if not isinstance(blob, bytes):
            return None, (
                f"the RNG entry of rank {rank} ({where}) is {type(blob).__name__}, not bytes"
            )
        try:
            entry = unseal(blob, f"the RNG entry of rank {rank} ({where})")
        except CheckpointError as error:
            return None, str(error)
        if not isinstance(entry, Mapping) or entry.get("nonce") != job.nonce:
            return None, (
                f"the RNG entry of rank {rank} ({where}) was not written by the save that wrote "
                "the shared entry (a checkpoint put together from two saves, such as a DCP "
                "directory saved over in place: save each checkpoint to a new directory)"
            )
        return entry.get("state"), where

    def _local_verdict(
        self, loaded: Mapping[str, Any], rank: int, world_size: int, platform: Platform
    ) -> _Local:
        """The verdict of this rank, and the job-wide re-derivation should any rank need one."""
        fallback: Reseed | None = None
        cannot: str | None = "it was loaded with on_mismatch='error'"
        digest = 0
        try:
            if not isinstance(loaded, Mapping):
                raise CheckpointError(
                    f"an hwrng entry is a mapping (from RNGState.state_dict), got "
                    f"{type(loaded).__name__}"
                )
            if self.old_layout or (OLD_LAYOUT_KEY in loaded and JOB_KEY not in loaded):
                raise old_layout("the checkpoint")
            value = loaded.get(JOB_KEY)
            if JOB_KEY in self.missing or (value is None and JOB_KEY not in loaded):
                return self._no_entry()
            if value is None or self.issued(value):
                raise CheckpointError(
                    "DCP did not fill hwrng's entry, so there is nothing to restore: a load "
                    "planner with flatten_state_dict=False does not hand a Stateful what it "
                    "read (hwrng refuses that option), and allow_partial_load skips an entry "
                    "the checkpoint lacks"
                )
            job = unpack_job(value)
            digest = digest62(value)
            if job.world_size != world_size:
                state, problem = (
                    None,
                    (f"the checkpoint was written by {job.world_size} rank(s) (here {world_size})"),
                )
            else:
                state, problem = self._own_entry(loaded, rank, job)
            if self.on_mismatch == "reseed":
                try:
                    fallback = plan_reseed(job.plan, job.position, self.mesh, platform, problem)
                    cannot = None
                except CheckpointError as error:
                    cannot = str(error)
            if state is None:
                return self._without_own(problem, fallback, cannot, digest)
            checked = verdict(state, self.on_mismatch, self.mesh, platform)
        except Exception as error:
            cause = None if isinstance(error, CheckpointError) else error
            text = str(error) if cause is None else repr(error)
            return _Local(_REFUSE, None, text, fallback, cannot, digest, cause)
        if isinstance(checked, Reseed):  # this rank's state does not fit: all re-derive
            if fallback is None:
                return _Local(_REFUSE, None, f"cannot re-derive: {cannot}", None, cannot, digest)
            return _Local(_RESEED, fallback, checked.why, fallback, None, digest)
        return _Local(_RESTORE, checked, "", fallback, cannot, digest)

    def _without_own(
        self, problem: str, fallback: Reseed | None, cannot: str | None, digest: int
    ) -> _Local:
        """The vote of a rank whose own state is missing, damaged, of another save or world."""
        if fallback is not None:
            return _Local(_RESEED, fallback, problem, fallback, None, digest)
        advice = (
            _REMEDY
            if self.on_mismatch == "error"
            else f"and the streams cannot be re-derived: {cannot}"
        )
        why = f"refusing to restore the RNG state: {problem}; {advice}"
        return _Local(_REFUSE, None, why, None, cannot, digest)
