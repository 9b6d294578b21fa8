"""The entry every rank shares in a checkpoint (``job``), and the names of the per-rank keys.

The shared entry is the same on every rank, so DCP writes one copy and a
trainer that writes rank 0's dict alone holds it: the layout
(:data:`DCP_FORMAT`), the world size, the job's seed plan (without any rank's
coordinates), the furthest DTensor position any rank reached on its plan
stream, the nonce of the save, which each rank's own entry repeats and
which names the set of per-rank files a save wrote (``_sets``), and the name
of the folder that set was written in (so that a copy of the trainer's file
under another name still finds it beside itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hwrng._exceptions import CheckpointError
from hwrng._plan import SeedDim, Seeding
from hwrng.checkpoint._checks import checked_plan
from hwrng.checkpoint._files import seal, unseal

__all__ = [
    "DCP_FORMAT",
    "JOB_KEY",
    "OLD_LAYOUT_KEY",
    "Job",
    "job_plan",
    "old_layout",
    "pack_job",
    "rank_key",
    "unpack_job",
]

#: The layout of the entries :class:`hwrng.RNGState` writes and reads (3: sealed values).
DCP_FORMAT = 3
#: The key of the entry every rank shares.
JOB_KEY = "job"
#: The one key of layout 1 (every rank's state in one value), which this hwrng refuses.
OLD_LAYOUT_KEY = "ranks"


def rank_key(rank: int) -> str:
    """The key of rank ``rank``'s own entry: ``"rank_<rank>"``."""
    return f"rank_{rank}"


@dataclass(frozen=True)
class Job:
    """The shared entry, checked."""

    world_size: int
    nonce: int
    plan: Seeding | None
    position: int
    folder: str | None = None  # the name of the folder of per-rank files, if any


def job_plan(plan: Seeding | None) -> dict[str, Any] | None:
    """The job's plan: the same on every rank (no coordinates, no mesh ranks, no members)."""
    if plan is None:
        return None
    layout = plan.layout
    job = Seeding(
        plan.seed,
        tuple(SeedDim(d.name, 0, d.weight, d.size) for d in plan.dims),
        plan.platform,
        plan.source,
        None if layout is None else type(layout)(layout.names, layout.shape),
        plan.generation,
        plan.named,
    )
    return job.to_dict()


def pack_job(
    world_size: int,
    nonce: int,
    plan: dict[str, Any] | None,
    position: int,
    folder: str | None = None,
) -> bytes:
    """The shared entry's sealed bytes (``folder``: the name of the per-rank files' folder)."""
    return seal(
        {
            "format": DCP_FORMAT,
            "world_size": world_size,
            "nonce": nonce,
            "plan": plan,
            "position": position,
            "folder": folder,
        }
    )


def unpack_job(value: object) -> Job:
    """The shared entry, checked; a :class:`~hwrng.CheckpointError` if it is not one."""
    if not isinstance(value, bytes):
        raise CheckpointError(
            f"the checkpoint's hwrng entry is {type(value).__name__}, not the bytes "
            "hwrng.RNGState saves (written by another hwrng, or not by RNGState)"
        )
    entry = unseal(value, "the checkpoint's hwrng entry")
    if not isinstance(entry, Mapping) or entry.get("format") != DCP_FORMAT:
        found = entry.get("format") if isinstance(entry, Mapping) else type(entry).__name__
        raise CheckpointError(
            f"the checkpoint's hwrng entry has layout {found!r}; this hwrng reads layout "
            f"{DCP_FORMAT}"
        )
    world_size, nonce, position = (entry.get(k) for k in ("world_size", "nonce", "position"))
    if not all(isinstance(v, int) and v >= 0 for v in (world_size, nonce, position)) or (
        world_size < 1  # type: ignore[operator]
    ):
        raise CheckpointError(
            "corrupt hwrng entry: its world size, nonce and position must be counts"
        )
    folder = entry.get("folder")
    if folder is not None and (
        not isinstance(folder, str) or not folder or "/" in folder or folder in (".", "..")
    ):
        raise CheckpointError(
            "corrupt hwrng entry: the folder of its per-rank files must be a plain name"
        )
    plan = checked_plan(entry.get("plan"))
    return Job(world_size, nonce, plan, position, folder)  # type: ignore[arg-type]


def old_layout(where: str) -> CheckpointError:
    """The refusal of hwrng's layout 1 (one key holding every rank's state)."""
    return CheckpointError(
        f"{where} holds hwrng's RNG entry in layout 1 (one key, {OLD_LAYOUT_KEY!r}, with every "
        f"rank's state), which this hwrng does not read: it reads layout {DCP_FORMAT} "
        f"({JOB_KEY!r} and one 'rank_<r>' key per rank). Resume from a checkpoint written by "
        "this hwrng"
    )
