"""``hwrng.save`` / ``hwrng.load``: each rank's state in a file of its own, one save across ranks.

Each rank writes its own file, but the files belong together: a save agrees
on one *save identity* across ranks (a nonce, in the reduction that also says
whether every rank could take its state), and every file records it. A load
compares them across ranks before any rank changes anything, so a job whose
ranks hold files of different saves -- one rank killed before it saved over
its file -- is refused on every rank, naming the ranks and their files,
instead of resuming half at one step and half at another; under
``on_mismatch="reseed"`` every rank re-derives its streams instead.

With a process group both are collectives over the default group: every rank
calls them (each with its own path). Without one, a single process saves and
loads alone, and nothing is compared.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hwrng._collectives import Comm, rank_and_size
from hwrng._exceptions import CheckpointError
from hwrng._platform import Platform
from hwrng._registry import platform_in_force
from hwrng.checkpoint._capture import state_dict
from hwrng.checkpoint._checks import (
    OnMismatch,
    Restore,
    check_on_mismatch,
    checked_plan,
    position_on_plan,
    verdict,
)
from hwrng.checkpoint._files import regular_destination, seal, unseal, write_atomically
from hwrng.checkpoint._reseed import Reseed, plan_reseed
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
    """
    target = os.fspath(path)
    rank, world_size = rank_and_size()
    resolved = platform_in_force(platform)
    comm = Comm(None, resolved)
    caught: CheckpointError | None = None
    document: dict[str, Any] = {}
    try:
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


def _raise_on_every_rank(comm: Comm, caught: CheckpointError | None, first: int, what: str) -> None:
    """Raise ``caught`` on the first rank that failed, and say so on every other rank."""
    why = comm.broadcast_text("" if caught is None else str(caught), first)
    if caught is not None and first == comm.rank:
        try:
            raise caught
        finally:
            caught = None
    raise CheckpointError(f"rank {first} {what}, so no rank did: {why}")


def _read(path: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The save identity and the state in the file of :func:`save` at ``path``."""
    what = f"the RNG state file {path!r}"
    try:
        blob = Storage().read(path, what)
    except OSError as error:
        raise CheckpointError(f"cannot read the RNG state {path!r}: {error}") from None
    if blob is None:
        raise CheckpointError(f"cannot read the RNG state {path!r}: there is no such file")
    content = unseal(blob, what)
    identity = content.get("save") if isinstance(content, Mapping) else None
    if (
        not isinstance(content, Mapping)
        or content.get("format") != FILE_FORMAT
        or not isinstance(identity, Mapping)
        or not isinstance(content.get("state"), Mapping)
    ):
        raise CheckpointError(
            f"{what} is not a file of hwrng.save in layout {FILE_FORMAT} (a file of each rank "
            "with its save's identity): written by an earlier hwrng, or by something else"
        )
    nonce = identity.get("nonce")
    if not isinstance(nonce, int) or not 0 <= nonce < 2**62:
        raise CheckpointError(f"corrupt {what}: its save identity is not a nonce")
    return identity, content["state"]


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
    ``all_reduce`` of six words compares the ranks: if any rank refuses (its
    file missing, damaged, or not a regular file -- refused without opening
    it), or the ranks' files come from different saves (a rank killed before
    it saved over its file), every rank raises a
    :class:`~hwrng.CheckpointError` naming the ranks and their files, and no
    rank changes anything. Under ``on_mismatch="reseed"``, files of different
    saves make every rank re-derive its streams from its file's seed plan
    instead, from the furthest DTensor position any rank saved, and warn.
    Without a process group, one process loads alone. See
    :func:`hwrng.load_state_dict` for the checks of the state itself.

    Raises
    ------
    CheckpointError
        On every rank, naming the rank and its file: a file that is missing,
        not a regular file, truncated, longer than written, changed in any
        byte, refused by :func:`hwrng.load_state_dict`, or of another save
        than the other ranks' files.
    """
    check_on_mismatch(on_mismatch)
    target = os.fspath(path)
    rank, world_size = rank_and_size()
    resolved = platform_in_force(platform)
    comm = Comm(None, resolved)
    failure: str | None = None
    nonce, position = 0, 0
    checked: Restore | Reseed | None = None
    fallback: Reseed | None = None
    cannot_why = "it was loaded with on_mismatch='error'"
    try:
        identity, document = _read(target)
        nonce = identity["nonce"]
        checked = verdict(document, on_mismatch, mesh, resolved)
        plan = checked_plan(document.get("plan"))
        position = 0 if plan is None else position_on_plan(plan, document.get("position"))
    except CheckpointError as error:
        failure = str(error)
    except Exception as error:  # tell the other ranks, or they wait for this one
        failure = repr(error)
    if failure is None and on_mismatch == "reseed":
        try:
            fallback = plan_reseed(plan, position, mesh, resolved, "files of different saves")
        except CheckpointError as error:
            cannot_why = str(error)
    words = comm.max(
        [int(failure is not None), nonce, position, int(fallback is None)],
        negated=[nonce, rank if failure is not None else world_size],
    )
    refused, newest, furthest, cannot, oldest, first = words
    if refused:
        why = comm.broadcast_text(failure or "", first)
        if first == rank:
            raise CheckpointError(f"rank {rank} refuses to load its RNG state: {failure}")
        raise CheckpointError(f"rank {first} refused to load its RNG state, so no rank did: {why}")
    if newest != oldest:
        mixed = _mixed_saves(comm, nonce, target)
        if on_mismatch == "reseed" and not cannot:
            assert fallback is not None
            checked = dataclasses.replace(fallback, position=furthest, why=mixed)
        elif on_mismatch == "reseed":
            raise CheckpointError(
                f"refusing to load the RNG state: {mixed}; and the streams cannot be "
                f"re-derived: {cannot_why}"
            )
        else:
            raise CheckpointError(f"refusing to load the RNG state: {mixed}; {_REMEDY}")
    assert checked is not None
    carry_out(checked, resolved, mesh)


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
        "while saving over its file"
    )
