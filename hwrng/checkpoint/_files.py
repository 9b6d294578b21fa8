"""Files: sealed bytes that hwrng checks when it reads them, written atomically.

Everything hwrng writes for a checkpoint -- a file of :func:`hwrng.save`, a rank's
own file beside a trainer's checkpoint, each entry of an
:class:`~hwrng.RNGState` -- is *sealed*: the ``torch.save`` bytes of the
value behind a header that holds their length and a BLAKE2b-256 checksum
(:func:`seal`). :func:`unseal` refuses, naming the file, bytes that are cut
short, longer than written, or changed anywhere (one flipped bit), before
unpickling anything: a torn write or a bit flip is never loaded.

A file is written beside its destination and renamed over it once complete
and flushed (:func:`write_atomically`): a failed or interrupted write leaves
the previous file as it was. The folder is then synced (:func:`sync_folder`),
so that the rename itself survives a power loss: without that, the folder may
come back holding the previous file. Replacing a regular file keeps its mode
and owner; a new file follows the umask.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import stat
import tempfile
from collections.abc import Mapping
from typing import Any

import torch

from hwrng._exceptions import CheckpointError

__all__ = ["MAGIC", "regular_destination", "seal", "sync_folder", "unseal", "write_atomically"]

#: The first bytes of everything hwrng seals (the last two name the seal's version).
MAGIC = b"hwrng\x00s1"
_LENGTH = 8
_CHECKSUM = 32
_HEADER = len(MAGIC) + _LENGTH + _CHECKSUM


def _checksum(payload: bytes | memoryview) -> bytes:
    return hashlib.blake2b(payload, digest_size=_CHECKSUM, person=b"hwrng-seal").digest()


def seal(value: Mapping[str, Any]) -> bytes:
    """``torch.save`` bytes of ``value`` behind a header: the magic, the length, a checksum."""
    buffer = io.BytesIO()
    torch.save(dict(value), buffer)
    payload = buffer.getvalue()
    return MAGIC + len(payload).to_bytes(_LENGTH, "little") + _checksum(payload) + payload


def unseal(blob: bytes, what: str) -> Any:
    """The value :func:`seal` sealed in ``blob``; refuse bytes that are torn or changed.

    Raises
    ------
    CheckpointError
        Naming ``what``: not sealed by hwrng, shorter or longer than written,
        or its checksum does not match (a changed byte), before anything is
        unpickled.
    """
    if not isinstance(blob, (bytes, bytearray)) or not bytes(blob[: len(MAGIC)]) == MAGIC:
        raise CheckpointError(
            f"{what} is not an RNG state sealed by this hwrng (it does not start with hwrng's "
            "header): written by an earlier hwrng or by something else, or damaged"
        )
    view = memoryview(blob)
    if len(blob) < _HEADER:
        raise CheckpointError(f"{what} is truncated: {len(blob)} bytes, shorter than its header")
    length = int.from_bytes(view[len(MAGIC) : len(MAGIC) + _LENGTH], "little")
    payload = view[_HEADER:]
    if len(payload) != length:
        how = "truncated" if len(payload) < length else "longer than written"
        raise CheckpointError(
            f"{what} is {how}: it holds {len(payload)} of the {length} bytes that were written "
            "after its header (a write that did not finish, or a damaged copy)"
        )
    if _checksum(payload) != bytes(view[len(MAGIC) + _LENGTH : _HEADER]):
        raise CheckpointError(
            f"{what} is corrupt: its checksum does not match its content (a byte changed "
            "after it was written)"
        )
    try:
        return torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as error:  # a checksum-valid payload that torch cannot read
        raise CheckpointError(
            f"{what} is not a readable hwrng RNG state: {type(error).__name__}: {error}"
        ) from None


def _file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


#: What :func:`save` calls each kind of file it refuses to replace, by ``stat`` test.
_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link that does not resolve (a loop)"),
)


def regular_destination(target: str) -> str:
    """The regular file (existing or not) that saving to ``target`` replaces; else refuse.

    ``target``'s symbolic links are followed to the end: the file to replace is
    the one the last link names, so that the links survive the rename.
    """
    resolved = os.path.realpath(target)
    via = "" if resolved == os.path.abspath(target) else f" (which resolves to {resolved!r})"
    if target.endswith(("/", os.sep)):
        kind = "a directory (the path ends with a separator)"
    else:
        try:
            mode = os.lstat(resolved).st_mode
        except FileNotFoundError:
            return resolved  # created by the rename (a missing directory fails there)
        except OSError as error:
            raise CheckpointError(
                f"cannot save the RNG state to {target!r}{via}: {type(error).__name__}: {error}"
            ) from error
        if stat.S_ISREG(mode):
            return resolved
        kind = next((name for test, name in _NOT_REGULAR if test(mode)), "a special file")
    raise CheckpointError(
        f"cannot save the RNG state to {target!r}{via}: it is {kind}, not a regular file; "
        "it was left as it is and nothing was written"
    )


def _keep_identity(descriptor: int, destination: str, target: str) -> None:
    """Give the new file the mode and owner of the file it replaces (the umask's mode if none)."""
    try:
        existing = os.stat(destination)
    except FileNotFoundError:
        os.fchmod(descriptor, _file_mode())
        return
    mine = os.fstat(descriptor)
    if (existing.st_uid, existing.st_gid) != (mine.st_uid, mine.st_gid):
        try:
            os.fchown(descriptor, existing.st_uid, existing.st_gid)
        except PermissionError as error:
            raise CheckpointError(
                f"cannot save the RNG state to {target!r}: the file it would replace belongs to "
                f"uid {existing.st_uid}, gid {existing.st_gid}, which this process cannot give "
                f"the new file ({error.strerror}); the previous file is unchanged"
            ) from error
    os.fchmod(descriptor, stat.S_IMODE(existing.st_mode))  # after chown, which may clear bits


#: What ``fsync`` of a folder raises where the filesystem cannot sync a folder (nothing to do).
_CANNOT_SYNC_FOLDERS = (errno.EINVAL, errno.ENOTSUP, errno.EBADF)


def sync_folder(path: str) -> None:
    """Make the names in the folder ``path`` durable: its renames, new files and removals.

    A rename is an entry of a folder; until the folder is synced, a power loss
    may leave the folder as it was before (the previous file back, a removed
    one too). Nothing is done where the platform opens no folder
    (``O_DIRECTORY`` missing: Windows) or the filesystem cannot sync one.

    Raises
    ------
    OSError
        If the folder cannot be opened or synced for any other reason.
    """
    directory_flag = getattr(os, "O_DIRECTORY", None)
    if directory_flag is None:
        return
    descriptor = os.open(path or ".", os.O_RDONLY | directory_flag)
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in _CANNOT_SYNC_FOLDERS:
            raise
    finally:
        os.close(descriptor)


def write_atomically(target: str, blob: bytes, *, temporary: str | None = None) -> None:
    """Write ``blob`` beside the file ``target`` resolves to, and rename it over that file.

    Only a regular file (or nothing yet) is replaced, keeping its mode and
    owner; symbolic links are followed and survive. ``temporary`` names the
    file written first (in the destination's directory); by default a new
    unique name. The file is synced before the rename, and its folder after
    it: once this returns, the new file survives a power loss.

    Raises
    ------
    CheckpointError
        Naming ``target`` and the cause; the previous file, if any, is unchanged
        and no temporary file is left -- or, where only the sync of the folder
        failed, saying that the new file is in place but may not survive a
        power loss.
    """
    destination = regular_destination(target)
    folder = os.path.dirname(destination)
    written: str | None = None
    try:
        if temporary is None:
            descriptor, written = tempfile.mkstemp(
                prefix=f".{os.path.basename(destination)}.", suffix=".tmp", dir=folder
            )
        else:
            written = os.path.join(folder, temporary)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
            descriptor = os.open(written, flags, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            _keep_identity(file.fileno(), destination, target)
            file.write(blob)
            file.flush()
            os.fsync(file.fileno())
        if regular_destination(target) != destination:
            raise CheckpointError(
                f"cannot save the RNG state to {target!r}: a symbolic link on the path was "
                f"changed while saving (it resolved to {destination!r}); nothing was replaced"
            )
        os.replace(written, destination)
        written = None
    except (OSError, RuntimeError) as error:
        raise CheckpointError(
            f"cannot save the RNG state to {target!r} (the previous file, if any, is "
            f"unchanged): {type(error).__name__}: {error}"
        ) from error
    finally:
        if written is not None:
            with contextlib.suppress(OSError):  # best effort: the save already failed
                os.unlink(written)
    try:
        sync_folder(folder)
    except OSError as error:
        raise CheckpointError(
            f"the RNG state was written to {target!r}, but its folder could not be synced, so "
            f"the new file may not survive a power loss: {type(error).__name__}: {error}"
        ) from error
