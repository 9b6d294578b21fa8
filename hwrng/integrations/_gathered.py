"""Every rank's RNG state in a checkpoint that only one rank writes.

Lightning's Trainer and Fabric, and accelerate's custom objects, call
``state_dict()`` on every rank but write what rank 0 returned; each rank's
streams must therefore travel to rank 0 first, and come back to their own rank
on load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hwrng._checkpoint import (
    OnMismatch,
    _from_bytes,
    _to_bytes,
    _where,
    load_state_dict,
    state_dict,
)
from hwrng._exceptions import CheckpointError
from hwrng._platform import Platform

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["AllRanksRNGState"]

FORMAT = "hwrng-all-ranks/1"


class AllRanksRNGState:
    """Every rank's :func:`hwrng.state_dict`, gathered into one rank-0 checkpoint and handed back.

    A stateful object (``state_dict`` / ``load_state_dict``) for trainers that
    save one checkpoint written by rank 0 (Lightning, Fabric, accelerate's
    ``register_for_checkpointing``). ``state_dict()`` is a collective: every
    rank must call it (these trainers do); it gathers each rank's complete
    state, as opaque bytes, into a list indexed by rank. ``load_state_dict``
    gives each rank its own entry through :func:`hwrng.load_state_dict`, which
    checks everything before changing anything.

    Parameters
    ----------
    on_mismatch, mesh, platform
        As for :func:`hwrng.load_state_dict`. With ``on_mismatch="error"`` a
        checkpoint from another world size is refused; with ``"reseed"`` each
        rank re-derives its streams from the saved plan for ``mesh`` (ranks
        beyond the saved world read rank 0's plan) and warns.
    """

    def __init__(
        self,
        *,
        on_mismatch: OnMismatch = "error",
        mesh: DeviceMesh | None = None,
        platform: Platform | str | None = None,
    ) -> None:
        if on_mismatch not in ("error", "reseed"):
            raise CheckpointError(f"on_mismatch must be 'error' or 'reseed', got {on_mismatch!r}")
        self.on_mismatch: OnMismatch = on_mismatch
        self.mesh = mesh
        self.platform = platform

    def state_dict(self) -> dict[str, Any]:
        """Every rank's state, gathered (a collective when ``torch.distributed`` is initialised)."""
        _, world_size = _where()
        mine = _to_bytes(state_dict(self.platform))
        if world_size == 1:
            return {"format": FORMAT, "world_size": 1, "ranks": [mine]}
        import torch.distributed as dist

        gathered: list[Any] = [None] * world_size
        dist.all_gather_object(gathered, mine)
        return {"format": FORMAT, "world_size": world_size, "ranks": gathered}

    def check(self, state_dict: Mapping[str, Any]) -> bytes:
        """Return this rank's entry of ``state_dict``, or raise :class:`~hwrng.CheckpointError`."""
        rank, world_size = _where()
        if not isinstance(state_dict, Mapping) or state_dict.get("format") != FORMAT:
            found = state_dict.get("format") if isinstance(state_dict, Mapping) else state_dict
            raise CheckpointError(f"not an hwrng all-ranks RNG state (format {found!r})")
        ranks = state_dict.get("ranks")
        if not isinstance(ranks, list) or not all(isinstance(b, bytes) for b in ranks) or not ranks:
            raise CheckpointError("the all-ranks RNG state has no per-rank entries (corrupt)")
        if len(ranks) != world_size and self.on_mismatch != "reseed":
            raise CheckpointError(
                f"refusing to restore this RNG state: it was written by {len(ranks)} ranks "
                f"(here {world_size}); pass on_mismatch='reseed' to re-derive the streams"
            )
        entry: bytes = ranks[rank] if rank < len(ranks) else ranks[0]
        return entry

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore this rank's own entry, or refuse (naming why) before anything changes."""
        blob = self.check(state_dict)
        rank, _ = _where()
        load_state_dict(
            _from_bytes(blob, f"the RNG state of rank {rank}"),
            on_mismatch=self.on_mismatch,
            mesh=self.mesh,
            platform=self.platform,
        )
