"""``hwrng.save`` / ``hwrng.load``: each rank's state in a file of its own, one save across ranks.

Each rank writes its own file, but the files belong together: a save agrees
on one *save identity* across ranks (a nonce, in the reduction that also says
whether every rank could take its state), and every file records it. A load
compares them across ranks before any rank changes anything, so a job whose
ranks hold files of different saves -- one rank killed before it saved over
its file -- is refused on every rank, naming the ranks and their files,
instead of resuming half at one step and half at another. Under
``on_mismatch="reseed"`` that, and any rank's file that does not fit (missing,
torn, of another world), makes every rank re-derive its streams from one saved
plan the ranks agree on (``_plan_vote``), or every rank refuse alike: never
some ranks restored and others re-derived, nor ranks re-derived from two plans.

With a process group both are collectives over the default group: every rank
calls them (each with its own path). Without one, a single process saves and
loads alone, and nothing is compared.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hwrng._collectives import WORD_LIMIT, Comm, rank_and_size
from hwrng._exceptions import CheckpointError, HwrngError
from hwrng._platform import Platform
from hwrng._registry import platform_in_force
from hwrng.checkpoint._capture import state_dict
from hwrng.checkpoint._checks import (
    OnMismatch,
    Restore,
    check_on_mismatch,
    checked_plan,
    examine,
    position_on_plan,
)
from hwrng.checkpoint._files import regular_destination, seal, unseal, write_atomically
from hwrng.checkpoint._plan_vote import Held, agreed_reseed
from hwrng.checkpoint._restore import carry_out
from hwrng.checkpoint._storage import Storage

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["FILE_FORMAT", "load", "save"]

#: The layout of a file of :func:`save`: the save's identity and the rank's state.
FILE_FORMAT = 1

_REMEDY = (
    "resume from another checkpoint, or load with on_mismatch='reseed' (and the new mesh= "
    "on a mesh) to re-derive every rank's streams from the saved seed plan"
)


def _nonce() -> int:
    return int.from_bytes(os.urandom(8), "little") % (2**62)  # moves no RNG stream


def save(path: str | os.PathLike[str], platform: Platform | str | None = None) -> None:
    """Write this rank's :func:`hwrng.state_dict` to ``path`` (one file per rank), atomically.

    With a process group this is a collective: call it on every rank, each
    with its own ``path``. The ranks agree on one save identity (a nonce,
    in one ``all_reduce`` of three words), which every file records, so that
    :func:`hwrng.load` refuses files of different saves; and one more
    ``all_reduce`` of two words makes every rank raise when any rank could not
    write. Without a process group, one process saves alone.

    The state is sealed (its length and a checksum ahead of it, so that
    :func:`hwrng.load` refuses a truncated or altered file), written to a
    temporary file in the same directory, and renamed over the file only once
    complete: a failed save leaves the previous file as it was (and no
    temporary file). Replacing a file keeps its mode and owner (a new file
    follows the umask).

    Only a regular file is ever replaced. ``path`` may name a regular file or
    nothing yet (the file is created); a symbolic link is followed, through
    every link, to the file the last one names, and that file is replaced or
    created under the same rule, so the links stay as they are (a dangling
    link gets the file it names, as :func:`open` would create it). Anything
    else -- a directory, a character or block device, a FIFO, a socket, a
    link loop -- is refused before anything is written, and is neither
    replaced nor written into.

    The check is made before the state is written and again just before the
    rename, but the two are separate steps: a process that puts something
    other than a regular file at the path in between (or re-points a link)
    can still have it replaced: save into a directory only you can write to,
    above all as root.

    Raises
    ------
    CheckpointError
        On every rank, if any rank's ``path`` is not a regular file (or a
        link to one, or nothing yet), saying what it is; if any rank cannot
        take its state (inside a fork) or write its file (a missing
        directory, a full disk, a file size limit), naming that rank, the path
        and the cause; or if the file it replaces has an owner this process
        cannot give the new one.
    BackendError
        On a rank whose own ``platform=`` names no usable backend (every other
        rank raises :class:`~hwrng.CheckpointError` naming it, at once).
    """
    target = os.fspath(path)
    rank, world_size = rank_and_size()
    resolved, caught = _platform_of(platform)
    comm = Comm(None, resolved)
    document: dict[str, Any] = {}
    try:
        if caught is None:
            regular_destination(target)  # refuse what is not a regular file before anything else
            document = state_dict(resolved)
    except CheckpointError as error:
        caught = error
    refused, nonce, first = comm.max(
        [int(caught is not None), _nonce()], negated=[rank if caught is not None else world_size]
    )
    if refused:
        try:
            _raise_on_every_rank(comm, caught, first, "could not save its RNG state")
        finally:
            caught = None  # the traceback holds this frame: no cycle through the error
    identity = {"nonce": nonce, "rank": rank, "world_size": world_size}
    try:
        write_atomically(target, seal({"format": FILE_FORMAT, "save": identity, "state": document}))
    except CheckpointError as error:
        caught = error
    failed, first = comm.max(
        [int(caught is not None)], negated=[rank if caught is not None else world_size]
    )
    if failed:
        try:
            _raise_on_every_rank(comm, caught, first, "could not write its RNG state")
        finally:
            caught = None


def _platform_of(platform: Platform | str | None) -> tuple[Platform, HwrngError | None]:
    """The platform ``platform=`` names, or the one the ranks talk through and why not.

    A rank whose own ``platform=`` names no usable backend still meets its
    peers in the collective -- through the platform in force -- so that every
    rank refuses at once instead of its peers waiting for it.
    """
    try:
        return platform_in_force(platform), None
    except HwrngError as error:
        if platform is None:
            raise  # no platform at all to reach the peers through
        return platform_in_force(None), error


def _raise_on_every_rank(comm: Comm, caught: HwrngError | None, first: int, what: str) -> None:
    """Raise ``caught`` on the first rank that failed, and say so on every other rank."""
    why = comm.broadcast_text("" if caught is None else str(caught), first)
    if caught is not None and first == comm.rank:
        try:
            raise caught
        finally:
            caught = None
    raise CheckpointError(f"rank {first} {what}, so no rank did: {why}")


def _read(path: str) -> tuple[Mapping[str, Any], Mapping[str, Any]] | str:
    """The save identity and the state in the file of :func:`save` at ``path``, or why none.

    A file that holds no usable state -- missing, not a regular file (refused
    unopened), torn, altered, or not of this layout -- is said why; a file
    that cannot be read (a permission, an I/O error) raises.
    """
    what = f"the RNG state file {path!r}"
    try:
        blob = Storage().read(path, what)
    except OSError as error:
        raise CheckpointError(f"cannot read the RNG state {path!r}: {error}") from None
    except CheckpointError as error:  # not a regular file
        return str(error)
    if blob is None:
        return f"cannot read the RNG state {path!r}: there is no such file"
    try:
        content = unseal(blob, what)
    except CheckpointError as error:
        return str(error)
    identity = content.get("save") if isinstance(content, Mapping) else None
    if (
        not isinstance(content, Mapping)
        or content.get("format") != FILE_FORMAT
        or not isinstance(identity, Mapping)
        or not isinstance(content.get("state"), Mapping)
    ):
        return (
            f"{what} is not a file of hwrng.save in layout {FILE_FORMAT} (a file of each rank "
            "with its save's identity): written by an earlier hwrng, or by something else"
        )
    nonce = identity.get("nonce")
    if not isinstance(nonce, int) or not 0 <= nonce < 2**62:
        return f"corrupt {what}: its save identity is not a nonce"
    return identity, content["state"]


@dataclass(frozen=True)
class _Own:
    """What this rank's file gives, before any rank compares.

    ``failure``: a refusal whatever ``on_mismatch`` says (the file cannot be
    read, or its state is corrupt); ``unfit``: why the file cannot be restored
    here (it holds no usable state, or was written by another world, rank,
    mesh, backend or device count), which ``on_mismatch="reseed"`` accepts.
    """

    failure: str | None = None
    unfit: str | None = None
    restore: Restore | None = None
    held: Held = field(default_factory=lambda: Held(None, None, 0))


def _own(path: str, mesh: DeviceMesh | None, platform: Platform) -> _Own:
    """Read and check this rank's file; change nothing."""
    try:
        read = _read(path)
        if isinstance(read, str):
            return _Own(unfit=read)
        identity, document = read
        examined = examine(document, mesh, platform)
        plan = checked_plan(document.get("plan"))
        position = 0 if plan is None else position_on_plan(plan, document.get("position"))
    except CheckpointError as error:
        return _Own(failure=str(error))
    except Exception as error:  # tell the other ranks, or they wait for this one
        return _Own(failure=repr(error))
    held = Held(identity["nonce"], plan, position)
    if isinstance(examined, str):
        return _Own(unfit=f"refusing to restore this RNG state: {examined}", held=held)
    return _Own(restore=examined, held=held)


def load(
    path: str | os.PathLike[str],
    *,
    on_mismatch: OnMismatch = "error",
    mesh: DeviceMesh | None = None,
    platform: Platform | str | None = None,
) -> None:
    """Restore this rank's RNG state from its file of :func:`hwrng.save`, or refuse on every rank.

    With a process group this is a collective: call it on every rank, each
    with its own ``path``. Every rank checks its file whole first, then one
    ``all_reduce`` of eight words gives every rank one verdict, before any
    rank changes anything: all restore; all re-derive (``on_mismatch="reseed"``);
    or all refuse, each with the same :class:`~hwrng.CheckpointError`.

    Every rank restores its own streams bit for bit when every rank's file
    fits and all come from one save. Otherwise, by default, every rank
    refuses, naming the rank and why: a rank's file missing, not a regular
    file (refused without opening it), torn or altered, or written by another
    world size, rank, mesh, backend or device count; or the ranks' files of
    different saves (a rank killed before it saved over its file), naming the
    ranks and their files.

    Under ``on_mismatch="reseed"`` each of those makes *every* rank re-derive
    its streams, as the next resume generation of one saved seed plan that
    every rank agrees on -- the plan held by more than half of the files found
    (the run that wrote most of them), else the lowest rank's -- for the new
    ``mesh``, continuing the device streams from the furthest DTensor
    position any file of that plan saved, and warn: replicas of the new mesh
    draw alike and shards apart. Every rank refuses instead, with the same
    message, when no rank found a file, when the files of one save hold
    different plans (ranks seeded each with its own), or when any rank cannot
    re-derive (no ``mesh=`` for a plan made on a mesh, a named state forked).

    A file that cannot be read (a permission, an I/O error) or whose state is
    corrupt is refused on every rank whatever ``on_mismatch`` says, and so is
    any load whose ranks pass different ``on_mismatch``. Without a
    process group, one process loads alone. See :func:`hwrng.load_state_dict`
    for the checks of the state itself.

    Raises
    ------
    CheckpointError
        On every rank, with the same message, naming the rank and its file:
        as above, a state refused by :func:`hwrng.load_state_dict`, and a
        rank whose own ``platform=`` names no usable backend.
    """
    target = os.fspath(path)
    rank, world_size = rank_and_size()
    resolved, unusable = _platform_of(platform)
    comm = Comm(None, resolved)
    reseeding = on_mismatch == "reseed"
    own = _own(target, mesh, resolved)
    failure = own.failure if unusable is None else str(unusable)
    try:
        check_on_mismatch(on_mismatch)  # a rank's bad argument still meets its peers: all raise
    except CheckpointError as error:
        failure = str(error)
    if failure is None and own.unfit is not None and not reseeding:
        failure = f"{own.unfit}; {_REMEDY}"
    nonce = own.held.nonce
    failed, unfit, newest, some_reseed, oldest, first_failed, lowest, every_reseed = comm.max(
        [
            int(failure is not None),
            int(own.unfit is not None),
            0 if nonce is None else nonce,
            int(reseeding),
        ],
        negated=[
            WORD_LIMIT - 1 if nonce is None else nonce,
            rank if failure is not None else world_size,
            rank if nonce is not None else world_size,
            int(reseeding),
        ],
    )
    if failed:
        why = comm.broadcast_text(failure or "", first_failed)
        raise CheckpointError(
            f"rank {first_failed} refused to load its RNG state, so no rank did: {why}"
        )
    if some_reseed != every_reseed:
        raise CheckpointError(
            "refusing to load the RNG state: the ranks passed different on_mismatch (some "
            "'reseed', some 'error'), so they would not reach one verdict; pass the same on "
            "every rank"
        )
    mixed = lowest < world_size and newest != oldest
    if not unfit and not mixed:
        assert own.restore is not None  # every rank's file fits, and all come from one save
        carry_out(own.restore, resolved, mesh)
        return
    if not reseeding:  # every unfit file was refused above: files of different saves
        mixed_why = _mixed_saves(comm, nonce or 0, target)
        raise CheckpointError(f"refusing to load the RNG state: {mixed_why}; {_REMEDY}")
    why = _why_reseed(comm, own, unfit=bool(unfit), mixed=mixed, path=target)
    if lowest >= world_size:
        raise CheckpointError(
            f"refusing to load the RNG state ({why}): no rank found a file of hwrng.save to "
            "re-derive the streams from; resume from another checkpoint"
        )
    reseed = agreed_reseed(comm, own.held, lowest=lowest, mesh=mesh, platform=resolved, why=why)
    carry_out(reseed, resolved, mesh)


def _why_reseed(comm: Comm, own: _Own, *, unfit: bool, mixed: bool, path: str) -> str:
    """Every rank: why the streams are re-derived, in the same words (a collective).

    Names the lowest rank without a usable file and the lowest whose file was
    written elsewhere (another world, rank, mesh), each where there is one.
    """
    if not unfit:
        return _mixed_saves(comm, own.held.nonce or 0, path)
    absent = own.unfit is not None and own.held.nonce is None
    elsewhere = own.unfit is not None and own.held.nonce is not None
    (count,) = comm.sum([int(own.unfit is not None)])
    firsts = comm.max(
        [], negated=[comm.rank if absent else comm.size, comm.rank if elsewhere else comm.size]
    )
    said = [
        f"rank {first}: {comm.broadcast_text(own.unfit or '', first)}"
        for first in firsts
        if first < comm.size
    ]
    ranks = f"the files of {count} of {comm.size} rank(s) do not fit"
    mixed_too = "; the files found come from more than one save" if mixed else ""
    return f"{ranks}: {'; '.join(said)}{mixed_too}"


def _mixed_saves(comm: Comm, nonce: int, path: str) -> str:
    """Every rank: which ranks' files differ from the save most ranks' files hold, named."""
    positions, total = comm.odd_ones(nonce, 8)
    odd = comm.rank in positions
    named = comm.collect_texts(path if odd else None, 4)
    files = ", ".join(f"rank {r}: {text!r}" for r, text in named)
    more = f" and {total - len(named)} more" if total > len(named) else ""
    return (
        f"the ranks' RNG files come from different saves: ranks {positions}{more} hold "
        f"another save than the other ranks ({files}{more}): a rank was killed or failed "
        "while saving over its file, or a rank's file is another run's"
    )
