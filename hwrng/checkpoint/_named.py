"""Which saves a trainer's file names: the hwrng entries in it, found without unpickling it.

A set of per-rank files may be removed only when no trainer's file in reach
names it, so a commit must learn which sets a trainer's file names, cheaply
and safely: a Lightning checkpoint may be gigabytes, and must never be
unpickled just to look (that would run its code). hwrng's shared entry is
sealed bytes that start with :data:`~hwrng.checkpoint._files.MAGIC` and hold
their own length, so they are found by searching the bytes:

- a ``torch.save`` file (a zip) is searched in its pickles (``data.pkl``),
  never in its tensors' data;
- a pickle (``torch.save``'s legacy format, ``pickle.dump`` of protocol 2 or
  later) is searched whole, up to :data:`LARGEST_SEARCHED`;
- any other file (safetensors, NumPy, text) holds no entry, and is not read
  past its first bytes.

Pickle protocol 3 and later store bytes as they are; protocol 2 (the one
``torch.save`` uses) stores them as a latin-1 string in UTF-8, which is
decoded back. Every candidate is then checked whole (length and checksum) and
read as a shared entry; anything else is ignored.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator

from hwrng._exceptions import CheckpointError
from hwrng.checkpoint._files import MAGIC
from hwrng.checkpoint._job import unpack_job
from hwrng.checkpoint._storage import Storage

__all__ = ["LARGEST_SEARCHED", "nonces_named"]

#: The largest file other than a zip that is searched whole; a larger one cannot be told.
LARGEST_SEARCHED = 256 * 2**20

_HEADER = len(MAGIC) + 8 + 32
# pickle opcodes that put a string or bytes ahead of their data: (opcode, length bytes, text?)
_OPCODES = (
    (b"X", 4, True),  # BINUNICODE
    (b"\x8c", 1, True),  # SHORT_BINUNICODE
    (b"\x8d", 8, True),  # BINUNICODE8
    (b"B", 4, False),  # BINBYTES
    (b"C", 1, False),  # SHORT_BINBYTES
    (b"\x8e", 8, False),  # BINBYTES8
)


def _candidates(data: bytes) -> Iterator[bytes]:
    """Every run of bytes in ``data`` that may be a sealed value."""
    start = 0
    while (at := data.find(MAGIC, start)) >= 0:
        start = at + 1
        length = int.from_bytes(data[at + len(MAGIC) : at + len(MAGIC) + 8], "little")
        yield data[at : at + _HEADER + length]  # stored as they are
        for opcode, width, text in _OPCODES:
            head = at - 1 - width
            if text and head >= 0 and data[head : head + 1] == opcode:
                size = int.from_bytes(data[head + 1 : at], "little")
                try:  # protocol 2: bytes pickled as a latin-1 string, in UTF-8
                    decoded = data[at : at + size].decode("utf-8").encode("latin-1")
                except (UnicodeDecodeError, UnicodeEncodeError):
                    continue
                yield decoded


def _nonces_in(data: bytes) -> set[int]:
    found: set[int] = set()
    for candidate in _candidates(data):
        try:
            found.add(unpack_job(candidate).nonce)
        except CheckpointError:
            continue
    return found


def nonces_named(storage: Storage, path: str) -> set[int] | None:
    """The nonces of the saves whose shared entry the file ``path`` holds.

    Returns an empty set where there is no regular file at ``path`` or it holds
    no hwrng entry, and ``None`` where it cannot be told: the file cannot be
    read, or it is larger than :data:`LARGEST_SEARCHED` and not a zip.
    """
    try:
        if storage.kind(path) != "file":
            return set()
        with storage.open_regular(path) as file:
            head = file.read(4)
            if head[:1] != b"\x80" and head != b"PK\x03\x04":
                return set()  # neither a pickle nor a zip (safetensors, NumPy, text): no entry
            if head == b"PK\x03\x04":  # a zip: torch.save's format
                file.seek(0)
                try:
                    with zipfile.ZipFile(file) as archive:
                        return set().union(
                            *(
                                _nonces_in(archive.read(member))
                                for member in archive.infolist()
                                if member.filename.endswith(".pkl")
                            )
                        )
                except zipfile.BadZipFile:  # cut short: search what is there
                    pass
            file.seek(0)
            data = file.read(LARGEST_SEARCHED + 1)
    except (OSError, CheckpointError, RuntimeError):
        return None
    if len(data) > LARGEST_SEARCHED:
        return None
    return _nonces_in(data)
