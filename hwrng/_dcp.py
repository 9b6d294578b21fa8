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
one key whatever the world size, seeding or mesh of the loading job. For the
same reason a checkpoint that only rank 0 writes (``torch.save`` of rank 0's
dict, as Lightning and accelerate do) holds every rank's state.

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

import functools
import io
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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


@dataclass
class _Local:
    """One rank's side of the vote."""

    code: int
    verdict: _Restore | _Reseed | None
    why: str
    fallback: _Reseed | None  # the job-wide re-derivation, from every saved rank's state
    cannot_reseed: str | None  # why this rank could not re-derive, if it could not
    cause: BaseException | None


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

    The same object serves checkpoints that only rank 0 writes (Lightning's
    Trainer and Fabric, accelerate's ``register_for_checkpointing``; the
    integrations in :mod:`hwrng.integrations` use it): those trainers call
    :meth:`state_dict` on every rank and write rank 0's dict with
    ``torch.save``, which holds every rank's state, and every rank loads the
    file and calls :meth:`load_state_dict`. :meth:`check` splits a load into
    the collective verdict and a later restore.

    For an in-memory snapshot without a checkpoint, use :func:`hwrng.state_dict`
    and :func:`hwrng.load_state_dict`: handing this object back the very dict
    its last :meth:`state_dict` returned reads as an entry that was not filled.

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
        rank, world_size = _where()
        local = self._local_verdict(state_dict, rank, world_size)
        votes = _all_gather((local.code, local.why, local.cannot_reseed), world_size)
        platform = resolve_platform(self.platform)
        refusals = [(r, why) for r, (code, why, _) in enumerate(votes) if code == _REFUSE]
        if refusals:
            if local.code == _REFUSE:
                raise CheckpointError(local.why) from local.cause
            first, why = refusals[0]
            raise CheckpointError(
                f"rank {first} refused to restore its RNG state, so no rank did: {why}"
            )
        reseeds = [(r, why) for r, (code, why, _) in enumerate(votes) if code == _RESEED]
        if not reseeds and isinstance(local.verdict, _Restore):
            return functools.partial(_carry_out, local.verdict, platform, self.mesh)
        if not reseeds:  # unreachable: a rank votes _RESTORE only with a _Restore
            raise CheckpointError(f"rank {rank}: internal error: no verdict to carry out")
        first, why = reseeds[0]
        unable = [(r, cannot) for r, (_, _, cannot) in enumerate(votes) if cannot is not None]
        if unable or local.fallback is None:
            who, cannot = unable[0] if unable else (rank, "no re-derivation was planned")
            raise CheckpointError(
                f"rank {first} must re-derive its streams ({why}), but rank {who} "
                f"cannot ({cannot}), so no rank changed anything"
            )
        local.fallback.why = local.why if local.code == _RESEED else f"rank {first}: {why}"
        return functools.partial(_carry_out, local.fallback, platform, self.mesh)

    def _local_verdict(self, loaded: Mapping[str, Any], rank: int, world_size: int) -> _Local:
        """The verdict of this rank, and the job-wide re-derivation should any rank need one."""
        fallback: _Reseed | None = None
        cannot_reseed: str | None = "it was loaded with on_mismatch='error'"
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
            why = f"the checkpoint was written by {len(ranks)} rank(s) (here {world_size})"
            if self.on_mismatch == "reseed":
                try:
                    documents = [
                        _check_header(_from_bytes(blob, f"the RNG state of saved rank {r}"))
                        for r, blob in enumerate(ranks)
                    ]
                    fallback, cannot_reseed = _reseed_verdict(documents, self.mesh, why), None
                except CheckpointError as error:
                    cannot_reseed = str(error)
            if len(ranks) != world_size:
                if fallback is None:
                    raise CheckpointError(
                        f"refusing to restore the RNG state: {why}; "
                        + (
                            "load with RNGState(on_mismatch='reseed', mesh=new_mesh) to "
                            "re-derive the streams"
                            if self.on_mismatch == "error"
                            else f"and it cannot be re-derived: {cannot_reseed}"
                        )
                    )
                return _Local(_RESEED, fallback, why, fallback, None, None)
            document = _from_bytes(ranks[rank], f"the RNG state of rank {rank}")
            verdict = _verdict(
                document, self.on_mismatch, self.mesh, resolve_platform(self.platform)
            )
        except Exception as error:
            if isinstance(error, CheckpointError):
                return _Local(_REFUSE, None, str(error), fallback, cannot_reseed, None)
            return _Local(_REFUSE, None, repr(error), fallback, cannot_reseed, error)
        if isinstance(verdict, _Reseed):
            return _Local(_RESEED, verdict, verdict.why, fallback, cannot_reseed, None)
        return _Local(_RESTORE, verdict, "", fallback, cannot_reseed, None)
