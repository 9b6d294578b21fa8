"""Where a checkpoint's files live: a local path, or an fsspec URL on the trainer's filesystem.

Rank files go to the filesystem of the trainer's checkpoint: a local path (or a
``file://`` URL) through ``os``, any other URL (``memory://``, ``s3://``,
``simplecache::file://...``) through fsspec, imported only when a URL needs it.
A caching layer (``simplecache::``, ``filecache::``, ``blockcache::``) is looked
through: hwrng reads and writes the target itself, so that what it reads is what
is there now, not a copy cached earlier by this process.

A storage error is never taken for "nothing there": only a missing file or
folder reads as absent, and any other error (a refused permission, a failed
request) is raised, so that a commit keeps every set and warns (``_commit``).

Renames and removals are made durable where the storage has folders to sync:
the local filesystem syncs the folder after each (``_files.sync_folder``); an
object store reached through fsspec has no folders, and each of its writes is
durable once it returns.

Reading never opens anything but a regular file: a FIFO, a device or a
directory where a file should be is refused after a ``stat``, without opening
it (an ``open`` of a FIFO blocks until a writer comes), and a local file is
opened with ``O_NONBLOCK`` and checked again, so that one swapped in between is
refused too.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import posixpath
import stat
from typing import Any

from hwrng._exceptions import CheckpointError
from hwrng.checkpoint._files import sync_folder, write_atomically

__all__ = ["Storage", "is_url", "storage_for"]

#: fsspec's caching layers, looked through to the filesystem they cache.
_CACHES = ("simplecache", "filecache", "blockcache", "cached")


def is_url(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` is an fsspec URL (``protocol://...`` or a chain ``a::b://...``)."""
    text = os.fspath(location)
    return "://" in text or "::" in text


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    names = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in names if test(mode)), "a special file")


class Storage:
    """The file operations a checkpoint's per-rank files need, on one filesystem.

    Paths are this filesystem's own (an absolute or relative local path, or the
    path part of a URL). This class is the local filesystem; :class:`_Fsspec`
    is any other.
    """

    url_prefix = ""
    #: Whether a folder is renamed in one step, every file in it at once (local: yes).
    renames_folders = True

    def join(self, *parts: str) -> str:
        """``parts`` joined by this filesystem's separator."""
        return os.path.join(*parts)

    def split(self, path: str) -> tuple[str, str]:
        """The folder holding ``path`` and its last name (a trailing separator ignored)."""
        return os.path.split(os.path.normpath(path))

    def kind(self, path: str) -> str | None:
        """``"file"``, ``"directory"``, what else is there (named), or ``None`` if nothing.

        Symbolic links are followed; a dangling one or a loop is ``None``.
        """
        try:
            return _kind(os.stat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as error:
            if error.errno == errno.ELOOP:  # a link loop
                return None
            raise

    def names(self, path: str) -> list[str]:
        """The names in the folder ``path`` (sorted); empty if there is no such folder."""
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read(self, path: str, what: str) -> bytes | None:
        """The bytes of the regular file ``path``; ``None`` if nothing is there.

        Raises
        ------
        CheckpointError
            If something other than a regular file is there (named, never opened),
            or it cannot be read.
        """
        kind = self.kind(path)
        if kind is None:
            return None
        if kind != "file":
            raise self._not_a_file(path, kind, what)
        return self._read_file(path, what)

    def _read_file(self, path: str, what: str) -> bytes | None:
        """The bytes of ``path``, found a regular file just before; ``None`` if it went since."""
        try:
            descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            return None
        with os.fdopen(descriptor, "rb") as file:
            found = _kind(os.fstat(file.fileno()).st_mode)
            if found != "file":  # swapped in after the stat: refused, not read
                raise self._not_a_file(path, found, what)
            return file.read()

    def open_regular(self, path: str) -> Any:
        """A binary file object of the regular file ``path`` (opened without blocking)."""
        kind = self.kind(path)
        if kind != "file":
            raise self._not_a_file(path, kind or "missing", "the file")
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        file = os.fdopen(descriptor, "rb")
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            file.close()
            raise self._not_a_file(path, "not a regular file", "the file")
        return file

    def _not_a_file(self, path: str, kind: str, what: str) -> CheckpointError:
        return CheckpointError(
            f"{what} ({self.url_prefix}{path!r}) is {kind}, not a regular file: refused "
            "without opening it; remove it, or resume from another checkpoint"
        )

    def make_folder(self, path: str) -> None:
        """Create the folder ``path`` and those missing above it, each creation made durable."""
        missing = []
        folder = os.path.normpath(path)
        while not os.path.isdir(folder):
            missing.append(folder)
            parent = os.path.dirname(folder)
            if parent in ("", folder):
                break
            folder = parent
        for folder in reversed(missing):
            try:
                os.mkdir(folder)
            except FileExistsError:  # another rank made it, and syncs it
                continue
            self.sync_folder(os.path.dirname(folder))

    def sync_folder(self, path: str) -> None:
        """Make the renames, creations and removals in the folder ``path`` durable."""
        sync_folder(path)

    def write_atomically(self, path: str, blob: bytes, temporary: str) -> None:
        """Write ``blob`` to ``temporary`` beside ``path``, flush it, and rename it to ``path``.

        The file and its folder (created if need be) are synced: once this
        returns, the file survives a power loss.
        """
        folder, _ = self.split(path)
        self.make_folder(folder)
        write_atomically(path, blob, temporary=temporary)

    def rename(self, source: str, destination: str) -> None:
        """Rename the file or folder ``source`` to ``destination`` (a name not in use)."""
        os.rename(source, destination)

    def remove(self, path: str) -> None:
        """Remove the file (or link, FIFO, ...) ``path``; nothing if it is gone already."""
        if os.path.lexists(path):
            with contextlib.suppress(FileNotFoundError):  # another process was first
                os.unlink(path)

    def remove_folder(self, path: str) -> bool:
        """Remove the folder ``path`` if it is empty; whether it is gone now."""
        try:
            os.rmdir(path)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True

    def remove_tree(self, path: str) -> None:
        """Remove ``path`` and everything in it, as far as possible."""
        import shutil

        shutil.rmtree(path, ignore_errors=True)


class _Fsspec(Storage):
    """A filesystem reached through fsspec (object stores have no folders, nor renames)."""

    renames_folders = False

    def __init__(self, fs: Any, prefix: str) -> None:
        self.fs = fs
        self.url_prefix = prefix

    def join(self, *parts: str) -> str:
        return posixpath.join(*parts)

    def split(self, path: str) -> tuple[str, str]:
        return posixpath.split(path.rstrip("/"))

    def kind(self, path: str) -> str | None:
        try:
            info = self.fs.info(path)
        except FileNotFoundError:  # any other error is no answer, and is raised
            return None
        kind = info.get("type")
        return kind if kind in ("file", "directory") else f"a {kind!r} entry"

    def names(self, path: str) -> list[str]:
        try:
            entries = self.fs.ls(path, detail=False)
        except FileNotFoundError:  # any other error is no answer, and is raised
            return []
        return sorted(posixpath.basename(str(entry).rstrip("/")) for entry in entries)

    def _read_file(self, path: str, what: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(path))
        except FileNotFoundError:
            return None

    def open_regular(self, path: str) -> Any:
        kind = self.kind(path)
        if kind != "file":
            raise self._not_a_file(path, kind or "missing", "the file")
        return self.fs.open(path, "rb")

    def write_atomically(self, path: str, blob: bytes, temporary: str) -> None:
        folder, _ = self.split(path)
        written = self.join(folder, temporary)
        try:
            self.make_folder(folder)
            with self.fs.open(written, "wb") as file:
                file.write(blob)
            self.fs.mv(written, path)
        except Exception as error:
            with contextlib.suppress(Exception):
                self.fs.rm(written)
            raise CheckpointError(
                f"cannot save the RNG state to {self.url_prefix}{path!r}: "
                f"{type(error).__name__}: {error}"
            ) from error

    def make_folder(self, path: str) -> None:
        with contextlib.suppress(FileExistsError, NotImplementedError):
            self.fs.makedirs(path, exist_ok=True)

    def sync_folder(self, path: str) -> None:
        """Nothing: an object store has no folder to sync (each write is durable on return)."""

    def rename(self, source: str, destination: str) -> None:
        self.fs.mv(source, destination, recursive=self.kind(source) == "directory")

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(path)

    def remove_folder(self, path: str) -> bool:
        try:
            if self.names(path):
                return False
            with contextlib.suppress(FileNotFoundError):
                self.fs.rmdir(path)
        except Exception:  # an object store may have no folder to remove, or refuse
            return False
        return True

    def remove_tree(self, path: str) -> None:
        with contextlib.suppress(Exception):
            self.fs.rm(path, recursive=True)


def _look_through_caches(fs: Any) -> Any:
    while any(name in _CACHES for name in _protocols(fs)) and hasattr(fs, "fs"):
        fs = fs.fs
    return fs


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = getattr(fs, "protocol", ())
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def storage_for(location: str | os.PathLike[str]) -> tuple[Storage, str]:
    """The filesystem of ``location`` and its path there.

    A local path or ``file://`` URL is the local filesystem; any other URL goes
    through fsspec, which is imported only now.

    Raises
    ------
    CheckpointError
        If ``location`` is a URL and fsspec is not installed, or fsspec does
        not know its protocol.
    """
    text = os.fspath(location)
    if not is_url(text):
        return Storage(), text
    try:
        fsspec = importlib.import_module("fsspec")  # only now: the core does not need it
    except ImportError:
        raise CheckpointError(
            f"{text!r} is a URL: hwrng writes and reads the per-rank RNG files beside the "
            "checkpoint through fsspec, which is not installed (pip install fsspec)"
        ) from None
    try:
        fs, path = fsspec.core.url_to_fs(text)
    except (ImportError, ValueError) as error:
        raise CheckpointError(
            f"cannot reach {text!r} through fsspec: {type(error).__name__}: {error}"
        ) from None
    fs = _look_through_caches(fs)
    if "file" in _protocols(fs) or "local" in _protocols(fs):
        return Storage(), path
    return _Fsspec(fs, f"{_protocols(fs)[0]}://"), path
