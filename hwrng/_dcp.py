"""``RNGState``: every rank's RNG state in a ``torch.distributed.checkpoint`` (DCP) checkpoint.

DCP loads *into* what ``Stateful.state_dict()`` returns, and calls it the same
way to save and to load, so the entry's layout must not depend on the process
that builds it. It is always one key, ``"ranks"``, holding one ``bytes``
value: a ``torch.save`` of ``{"format", "world_size", "nonces", "ranks"}``,
where ``ranks[r]`` is rank ``r``'s :func:`hwrng.state_dict` (itself
``torch.save``-d) and ``nonces[r]`` a random tag from ``os.urandom`` (no RNG
stream moves). Every rank gathers every rank's state, so the value is the same
on every rank; DCP's deduplication of equal keys (with or without
``dedup_save_to_lowest_rank``) then drops only copies, and a load finds the
one key whatever the world size, seeding or mesh of the loading job.

The value a load hands back is compared with the one this object built as
the template: DCP replaces a value it fills with a new object, so the
template itself coming back means DCP did not fill it (a load planner with
``flatten_state_dict=False``, or ``allow_partial_load`` over a checkpoint
without the entry), which is refused, never "restored". (Each entry also
carries random tags, so no saved value can equal a template.) Then every rank
agrees, with one small ``all_gather_object``, on one verdict -- all restore,
all re-derive, or all refuse -- before any rank changes anything.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from hwrng._checkpoint import (
    OnMismatch,
    _carry_out,
    _check_header,
    _check_on_mismatch,
    _from_bytes,
    _Reseed,
    _reseed_verdict,
    _Restore,
    _to_bytes,
    _verdict,
    _where,
    state_dict,
)
from hwrng._exceptions import CheckpointError
from hwrng._platform import Platform
from hwrng._registry import resolve_platform

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["DCP_FORMAT", "RNGState"]

#: The layout of the DCP entry :class:`RNGState` writes and reads.
DCP_FORMAT = 1

_KEY = "ranks"
_RESTORE, _RESEED, _REFUSE = 0, 1, 2


def _pack(world_size: int, entries: list[tuple[str, Any]]) -> bytes:
    buffer = io.BytesIO()
    torch.save(
        {
            "format": DCP_FORMAT,
            "world_size": world_size,
            "nonces": [nonce for nonce, _ in entries],
            "ranks": [blob for _, blob in entries],
        },
        buffer,
    )
    return buffer.getvalue()


def _unpack(value: object) -> list[bytes]:
    """Each saved rank's serialised state, after checking the entry's layout."""
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
    world_size, ranks = entry.get("world_size"), entry.get("ranks")
    if (
        not isinstance(world_size, int)
        or world_size < 1
        or not isinstance(ranks, list)
        or len(ranks) != world_size
        or not all(isinstance(blob, bytes) for blob in ranks)
    ):
        raise CheckpointError(
            "corrupt hwrng entry: it must hold one serialised state per saved rank"
        )
    return ranks


def _all_gather(value: Any, world_size: int) -> list[Any]:
    if world_size == 1:
        return [value]
    import torch.distributed as dist

    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, value)
    return gathered


class RNGState:
    """Every rank's RNG state in a ``torch.distributed.checkpoint`` (DCP) checkpoint.

    Implements DCP's ``Stateful`` protocol: put one in the state dict you save
    and load, next to the model and optimizer::

        state = {"model": model_state, "optim": optim_state, "rng": hwrng.RNGState()}
        dcp.save(state, checkpoint_id=path)
        ...
        dcp.load(state, checkpoint_id=path)  # each rank gets its own streams back

    The entry is one key (``"ranks"``) holding every rank's
    :func:`hwrng.state_dict` as one ``bytes`` value, the same on every rank,
    whatever the process did before (see the module notes). Saving and
    loading each run one ``all_gather_object`` over the default process group
    (so every rank must take part, as DCP requires anyway).

    On load, every rank reaches the same verdict: all restore their own
    streams bit for bit; or, under ``on_mismatch="reseed"`` when the world
    size, mesh or any rank's state does not match, all re-derive every stream
    from the saved seed plan and continue the default generator at the saved
    DTensor position; or all refuse with a :class:`~hwrng.CheckpointError`
    (naming the rank and why), changing nothing.

    Supported DCP options: the default planners, ``dedup_save_to_lowest_rank``,
    ``allow_partial_load`` (the entry is never missing from a checkpoint this
    class wrote) and ``async_save`` (the state is the one at the call). A load
    planner with ``flatten_state_dict=False`` does not hand a ``Stateful``
    what it read, so that load is refused.

    For an in-memory snapshot without DCP, use :func:`hwrng.state_dict` and
    :func:`hwrng.load_state_dict`: handing this object back the very dict its
    last :meth:`state_dict` returned reads as an entry DCP did not fill.

    Parameters
    ----------
    on_mismatch, mesh, platform
        As for :func:`hwrng.load_state_dict`.
    """

    def __init__(
        self,
        *,
        on_mismatch: OnMismatch = "error",
        mesh: DeviceMesh | None = None,
        platform: Platform | str | None = None,
    ) -> None:
        _check_on_mismatch(on_mismatch)
        self.on_mismatch: OnMismatch = on_mismatch
        self.mesh = mesh
        self.platform = platform
        self._template: bytes | None = None

    def state_dict(self) -> dict[str, Any]:
        """Every rank's state under one key (DCP calls this to save, and to load into)."""
        _, world_size = _where()
        try:
            own: tuple[str, bytes | str] = (
                os.urandom(16).hex(),
                _to_bytes(state_dict(self.platform)),
            )
        except CheckpointError as error:  # tell the others, or they wait in the gather
            own = ("", str(error))
        gathered = _all_gather(own, world_size)
        failed = [(r, why) for r, (_, why) in enumerate(gathered) if isinstance(why, str)]
        if failed:
            rank, why = failed[0]
            raise CheckpointError(f"rank {rank} cannot take its RNG state: {why}")
        value = _pack(world_size, gathered)
        self._template = value
        return {_KEY: value}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore, re-derive or refuse on every rank alike (see the class notes)."""
        rank, world_size = _where()
        code, verdict, message, fallback = self._local_verdict(state_dict, rank, world_size)
        votes = _all_gather((code, message, fallback is not None), world_size)
        platform = resolve_platform(self.platform)
        refusals = [(r, m) for r, (c, m, _) in enumerate(votes) if c == _REFUSE]
        if refusals:
            if code == _REFUSE:
                raise CheckpointError(message)
            first, why = refusals[0]
            raise CheckpointError(
                f"rank {first} refused to restore its RNG state, so no rank did: {why}"
            )
        reseeds = [(r, m) for r, (c, m, _) in enumerate(votes) if c == _RESEED]
        if not reseeds and isinstance(verdict, _Restore):
            _carry_out(verdict, platform, self.mesh)
            return
        if not reseeds:  # every rank restores: only a _Restore has code _RESTORE
            raise CheckpointError(f"rank {rank}: internal error: no verdict to carry out")
        unable = [r for r, (_, _, able) in enumerate(votes) if not able]
        if unable or not isinstance(fallback, _Reseed):
            raise CheckpointError(
                f"rank {reseeds[0][0]} must re-derive its streams ({reseeds[0][1]}), but rank(s) "
                f"{unable} cannot (load every rank with on_mismatch='reseed' and a mesh), so "
                "no rank changed anything"
            )
        fallback.why = message if code == _RESEED else f"rank {reseeds[0][0]}: {reseeds[0][1]}"
        _carry_out(fallback, platform, self.mesh)

    def _local_verdict(
        self, loaded: Mapping[str, Any], rank: int, world_size: int
    ) -> tuple[int, _Restore | _Reseed | None, str, _Reseed | None]:
        """``(code, this rank's verdict, why, the job-wide re-derivation or None)``."""
        fallback: _Reseed | None = None
        try:
            value = loaded.get(_KEY) if isinstance(loaded, Mapping) else None
            if value is None or value is self._template:
                raise CheckpointError(
                    "DCP did not fill hwrng's entry, so there is nothing to restore: a load "
                    "planner with flatten_state_dict=False does not hand a Stateful what it "
                    "read (hwrng refuses that option), and allow_partial_load skips an entry "
                    "the checkpoint lacks"
                )
            ranks = _unpack(value)
            if self.on_mismatch == "reseed":
                documents = [
                    _check_header(_from_bytes(blob, f"the RNG state of saved rank {r}"))
                    for r, blob in enumerate(ranks)
                ]
                why = f"the checkpoint was written by {len(ranks)} rank(s) (here {world_size})"
                fallback = _reseed_verdict(documents, self.mesh, why)
            if len(ranks) != world_size:
                why = f"the checkpoint was written by {len(ranks)} rank(s) (here {world_size})"
                if fallback is None:
                    raise CheckpointError(
                        f"refusing to restore the RNG state: {why}; load with "
                        "RNGState(on_mismatch='reseed', mesh=new_mesh) to re-derive the streams"
                    )
                return _RESEED, fallback, why, fallback
            document = _from_bytes(ranks[rank], f"the RNG state of rank {rank}")
            verdict = _verdict(
                document, self.on_mismatch, self.mesh, resolve_platform(self.platform)
            )
        except CheckpointError as error:
            return _REFUSE, None, str(error), fallback
        except Exception as error:
            return _REFUSE, None, f"{type(error).__name__}: {error}", fallback
        if isinstance(verdict, _Reseed):
            return _RESEED, verdict, verdict.why, fallback
        return _RESTORE, verdict, "", fallback
