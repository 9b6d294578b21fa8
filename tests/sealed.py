"""The sealed byte format hwrng writes (docs/checkpoint.md), read and written independently.

``b"hwrng\\x00s1"`` | payload length, 8 bytes little-endian | BLAKE2b-256 of the payload
(person ``b"hwrng-seal"``) | the payload, ``torch.save`` bytes.
"""

from __future__ import annotations

import hashlib
import io
from typing import Any

import torch

MAGIC = b"hwrng\x00s1"
HEADER = len(MAGIC) + 8 + 32


def opened(blob: bytes) -> Any:
    """What a sealed blob holds (its header checked)."""
    assert blob[: len(MAGIC)] == MAGIC
    length = int.from_bytes(blob[len(MAGIC) : len(MAGIC) + 8], "little")
    payload = blob[HEADER:]
    assert len(payload) == length
    checksum = hashlib.blake2b(payload, digest_size=32, person=b"hwrng-seal").digest()
    assert checksum == blob[len(MAGIC) + 8 : HEADER]
    return torch.load(io.BytesIO(payload), weights_only=True)


def sealed(value: Any) -> bytes:
    """``value`` sealed as hwrng seals it."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    payload = buffer.getvalue()
    checksum = hashlib.blake2b(payload, digest_size=32, person=b"hwrng-seal").digest()
    return MAGIC + len(payload).to_bytes(8, "little") + checksum + payload
