"""Which saved seed plan a per-rank re-derivation starts from: one plan, agreed by every rank.

When :func:`hwrng.load` re-derives the streams (``on_mismatch="reseed"``),
each rank holds at most its own file, and the files need not agree: a rank of
a grown world has none, a rank may hold a file of another run. Replicas draw
alike only if every rank re-derives from the same plan, so the ranks agree on
one before any rank changes anything:

- the plan is a file's *job plan* (its seed, terms, mesh shape, generation
  and named dims, without any rank's coordinates: what every rank of one job
  holds alike), the one held by more than half of the files found -- the run
  that wrote most of them; when no plan is, the plan of the lowest rank that
  found a file. A stray file of another run is outvoted, and a job resumed on
  more ranks than it saved re-derives from the plan its files hold;
- every file of one save of that plan must hold that plan: a save whose ranks
  were seeded with different plans (each rank its own seed, without a mesh)
  gives no plan to re-derive every rank from, and is refused;
- the device streams continue from the furthest DTensor position any file of
  that plan saved, past anything the saved job drew on those seeds;
- the plan travels as text from the lowest rank that holds it; every rank
  then plans its own re-derivation (:func:`plan_reseed`), and when any rank
  cannot, every rank refuses with the same message.

A vote is a few fixed-size reductions (62 words for the bits of the plans'
digests) and a broadcast of the plan's text in messages of a few kilobytes:
nothing grows with the world, and none of it runs unless the streams cannot
be restored.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hwrng._collectives import MESSAGE_BYTES, Comm, digest62
from hwrng._exceptions import CheckpointError
from hwrng._plan import Seeding
from hwrng._platform import Platform
from hwrng.checkpoint._checks import checked_plan
from hwrng.checkpoint._job import job_plan
from hwrng.checkpoint._reseed import Reseed, plan_reseed

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["Held", "agreed_reseed"]

#: The bits of a plan digest (:func:`~hwrng._collectives.digest62`), each one word of the vote.
_DIGEST_BITS = 62


@dataclass(frozen=True)
class Held:
    """What this rank's file holds for the vote.

    ``nonce`` is ``None`` when the rank found no usable file; ``position`` is
    where its default generator stood on its plan's stream.
    """

    nonce: int | None
    plan: Seeding | None
    position: int


def _job_text(plan: Seeding | None) -> str:
    """The job plan as canonical text: alike, byte for byte, on every rank of one job."""
    return json.dumps(job_plan(plan), sort_keys=True, separators=(",", ":"))


def _broadcast(comm: Comm, text: str, length: int, source: int) -> str:
    """``text`` of group position ``source`` on every rank, in messages of the fixed size."""
    pieces = [
        comm.broadcast_text(text[start : start + MESSAGE_BYTES], source)
        for start in range(0, length, MESSAGE_BYTES)
    ]
    return "".join(pieces)


def agreed_reseed(
    comm: Comm,
    held: Held,
    *,
    lowest: int,
    mesh: DeviceMesh | None,
    platform: Platform,
    why: str,
) -> Reseed:
    """Agree on one saved plan and plan this rank's re-derivation from it; change nothing.

    A collective over ``comm``: every rank calls it with what its own file
    holds (``lowest``: the lowest rank that found a usable file, as every rank
    counted it). Every rank returns a re-derivation from the same plan, or
    every rank raises the same :class:`~hwrng.CheckpointError`.
    """
    usable = held.nonce is not None
    text = _job_text(held.plan) if usable else ""
    digest = digest62(text.encode("ascii")) if usable else 0
    bits = [(digest >> bit) & 1 for bit in range(_DIGEST_BITS)]
    *counts, found, lowest_digest = comm.sum(
        [*bits, int(usable), digest if comm.rank == lowest else 0]
    )
    # the bits most files hold spell the plan more than half of them hold, if one does
    majority = sum(1 << bit for bit, count in enumerate(counts) if 2 * count > found)
    with_majority, with_lowest = comm.sum(
        [int(usable and digest == majority), int(usable and digest == lowest_digest)]
    )
    if 2 * with_majority > found:
        chosen, holders = majority, with_majority
    else:
        chosen, holders = lowest_digest, with_lowest
    mine = usable and digest == chosen
    furthest, length, one_save, source = comm.max(
        [held.position if mine else 0, len(text) if mine else 0, (held.nonce or 0) if mine else 0],
        negated=[comm.rank if mine else comm.size],
    )
    received = _broadcast(comm, text if comm.rank == source else "", length, source)
    cannot: str | None = None
    reseed: Reseed | None = None
    try:
        if digest62(received.encode("ascii")) != chosen:
            raise CheckpointError(f"the seed plan of rank {source}'s file did not arrive whole")
        plan = checked_plan(json.loads(received))
        reseed = plan_reseed(plan, furthest, mesh, platform, why)
    except CheckpointError as error:
        cannot = str(error)
    except Exception as error:  # tell the other ranks, or they wait for this one
        cannot = f"the seed plan of rank {source}'s file cannot be used here: {error!r}"
    odd = usable and held.nonce == one_save and digest != chosen
    first_odd, first_cannot = comm.max(
        [],
        negated=[comm.rank if odd else comm.size, comm.rank if cannot is not None else comm.size],
    )
    if first_odd < comm.size:
        raise CheckpointError(
            f"refusing to load the RNG state ({why}), and the streams cannot be re-derived: "
            f"the files of one save hold different seed plans (rank {first_odd}'s is not rank "
            f"{source}'s): its ranks were not seeded with one plan (hwrng.manual_seed(seed, "
            "mesh, sharded_dims=...)), so no one plan re-derives every rank's streams; resume "
            "from another checkpoint"
        )
    if first_cannot < comm.size:
        said = comm.broadcast_text(cannot or "", first_cannot)
        raise CheckpointError(f"refusing to load the RNG state: rank {first_cannot}: {said}")
    assert reseed is not None
    chose = (
        f"the seed plan that {holders} of the {found} files found hold"
        if 2 * holders > found
        else f"the seed plan of rank {source}'s file, the lowest rank's of the {found} found "
        f"(no plan is held by more than half of them; this one by {holders})"
    )
    return dataclasses.replace(reseed, why=f"{why}; every rank re-derived from {chose}")
