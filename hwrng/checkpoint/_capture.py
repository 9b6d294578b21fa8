"""Taking this rank's complete RNG state: :func:`state_dict`, the document every checkpoint holds.

What is saved, per rank (format :data:`FORMAT`)::

    format, written_by {hwrng, backend, device_count, rank, world_size, mesh, sharded_dims,
                invariant: the invariant ops' contract, if the job drew any (another is refused)}
    python      random.getstate()           numpy  the legacy global generator
    torch_cpu   the host generator's state  host_reading  what makes it read as it does
    devices     every device of the platform (not only the current one)
    position    [seed, offset] of the current device's default generator: where the
                DTensor stream stands (``on_mismatch="reseed"`` continues it there)
    pythonhashseed, plan (the seed plan in force), trackers {name: {state: tensor}}
    digest      BLAKE2b of all of the above

The DTensor adapter keeps no state of its own: its position is the device
generators' offsets (and, on the CPU, ``host_reading``), so it is restored
with them. The digest guards against damage, not against a crafted document:
every value is also checked when it is loaded (see ``_checks``).
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from hwrng._claims import claim, claim_for
from hwrng._collectives import rank_and_size
from hwrng._exceptions import CheckpointError
from hwrng._host import HOST_COUNTER, host_generator
from hwrng._philox._contract import recorded as invariant_contract
from hwrng._plan import Seeding
from hwrng._platform import Platform
from hwrng._registry import platform_in_force
from hwrng._seeding import current_seeding
from hwrng._states import live_trackers
from hwrng._version import __version__

__all__ = [
    "FORMAT",
    "PYTHON_WORDS",
    "device_generators",
    "document_digest",
    "state_dict",
    "written_by",
]

#: The format :func:`state_dict` writes; loading reads this one only.
FORMAT = 3
#: The length of the word list of ``random.getstate()``.
PYTHON_WORDS = 625


def _canonical(value: Any, out: io.BytesIO) -> None:
    """Feed ``value`` to a digest in one canonical byte form (tensors by dtype, shape, bytes)."""
    if isinstance(value, torch.Tensor):
        out.write(f"T{value.dtype}{tuple(value.shape)}".encode())
        out.write(value.detach().cpu().contiguous().numpy().tobytes())
    elif isinstance(value, Mapping):
        out.write(b"{")
        for key in sorted(value, key=repr):
            out.write(repr(key).encode())
            _canonical(value[key], out)
        out.write(b"}")
    elif isinstance(value, (list, tuple)):
        out.write(b"[")
        for item in value:
            _canonical(item, out)
        out.write(b"]")
    else:
        out.write(repr(value).encode())
        out.write(b";")


def document_digest(document: Mapping[str, Any]) -> str:
    """The digest of a document's content (every key but ``"digest"``), as in :func:`state_dict`."""
    buffer = io.BytesIO()
    _canonical({k: v for k, v in document.items() if k != "digest"}, buffer)
    return hashlib.blake2b(buffer.getvalue(), digest_size=16).hexdigest()


def _python_state() -> dict[str, Any]:
    version, words, gauss = random.getstate()
    return {"version": version, "words": torch.tensor(words, dtype=torch.int64), "gauss": gauss}


def _numpy_state() -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "kind": str(kind),
        "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def written_by(platform: Platform, seeding: Seeding | None) -> dict[str, Any]:
    """Who takes a state here: version, backend, device count, rank, world size, mesh.

    And the invariant ops' contract, when the job drew invariant values.
    """
    rank, world_size = rank_and_size()
    layout = seeding.layout if seeding is not None else None
    written = {
        "hwrng": __version__,
        "backend": platform.name,
        "device_count": platform.device_count(),
        "rank": rank,
        "world_size": world_size,
        "mesh": None if layout is None else layout.to_dict(),
        "sharded_dims": None if seeding is None else list(seeding.sharded_dims),
    }
    contract = invariant_contract()
    if contract is not None:  # the job drew placement-invariant values
        written["invariant"] = contract
    return written


def device_generators(platform: Platform) -> list[torch.Generator]:
    """The platform's device generators, each of them (none where the host is the device)."""
    if platform.uses_host_generator:
        return []
    return [platform.generator(i) for i in range(platform.device_count())]


def state_dict(platform: Platform | str | None = None) -> dict[str, Any]:
    """Return this rank's complete RNG state, for ``torch.save`` or a DCP checkpoint.

    Covers Python's ``random``, NumPy's legacy global generator, torch's CPU
    generator, every device of the platform, ``PYTHONHASHSEED`` as recorded,
    the seed plan in force, the DTensor adapter's position, and every named
    state of every live :class:`~hwrng.RNGStatesTracker`, by tracker name.
    Reading changes nothing.

    Parameters
    ----------
    platform
        Whose devices to save; by default the plan's platform, else
        :func:`hwrng.get_platform`'s choice.

    Returns
    -------
    dict
        Tensors and plain values (format 3), versioned (``"format"``) and
        digested (``"digest"``); ``torch.save`` and
        ``torch.load(weights_only=True)`` round-trip it.

    Raises
    ------
    CheckpointError
        Inside ``fork_rng``, ``isolate_rng``, an ``RNGStatesTracker.fork`` or a
        tracked region, whose generators hold a state the block throws away.
    """
    seeding = current_seeding()
    resolved = platform_in_force(platform)
    host = host_generator()
    devices = device_generators(resolved)
    _refuse_inside_a_fork(host, *devices)
    current = resolved.generator()
    with claim(host, *devices):
        seed, offset = resolved.counter.peek(current)
        document: dict[str, Any] = {
            "format": FORMAT,
            "written_by": written_by(resolved, seeding),
            "python": _python_state(),
            "numpy": _numpy_state(),
            "torch_cpu": host.get_state(),
            "host_reading": HOST_COUNTER.export(host),
            "devices": [g.get_state() for g in devices],
            "position": [seed, offset],
            "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
            "plan": None if seeding is None else seeding.to_dict(),
            "trackers": {name: t.get_states() for name, t in live_trackers().items()},
        }
    document["digest"] = document_digest(document)
    return document


def _refuse_inside_a_fork(*generators: torch.Generator) -> None:
    """Refuse a snapshot taken while a fork holds a temporary state in a generator.

    Inside ``RNGStatesTracker.fork``, ``fork_rng`` or ``isolate_rng`` (or a
    tracked region) the default generator holds a state the block will throw
    away, and the stream it replaced is parked elsewhere: a snapshot would save
    the wrong stream as the default one and lose the real one.
    """
    forked = sorted(
        f"{name!r}: {sorted(t.forked)}" for name, t in live_trackers().items() if t.forked
    )
    me = threading.current_thread().name
    held = [g for g in generators if (c := claim_for(g)).depth > 0 and c.owner == me]
    if forked or held:
        inside = (
            f"RNGStatesTracker.fork of {', '.join(forked)}"
            if forked
            else "fork_rng, isolate_rng, an RNGStatesTracker.fork or a tracked region"
        )
        raise CheckpointError(
            f"hwrng.state_dict() was called inside {inside}: the generators hold a state "
            "that the block throws away, and the stream it replaced is parked until the "
            "block ends; take the RNG state outside the block"
        )
