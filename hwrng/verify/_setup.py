"""Before any stream is judged: the arguments, and what every rank must hold alike.

A call that cannot say which ranks it meets (no process group, a ``group``
this rank is not in) is refused at once; other wrong arguments are refused
before any collective, and the rank's peers told (see ``_arrival``). Then one
reduction over the whole group tells whether every rank built its
observations (a rank that could not is named with its error, on every rank:
nobody waits in a collective for it), holds the same plan, was asked for the
same streams and compares along the same mesh. Ranks may hold different
streams (a named state of one pipeline stage); their union is judged, at one
reduction and one broadcast per distinct list of names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hwrng._collectives import MESSAGE_BYTES, WORD_LIMIT, Comm, digest_of, distributed
from hwrng._exceptions import DistributedError, MeshError
from hwrng._plan import Seeding
from hwrng._seeding import seeded_mesh
from hwrng._validation import check_dim_names
from hwrng.verify._streams import order

__all__ = [
    "DISTINCT_NAME_LISTS",
    "Agreed",
    "agree_on",
    "check_arguments",
    "check_group",
    "comparison_mesh",
    "group_problems",
    "members_digest",
    "name_minority",
    "names_message",
    "union_of_names",
]

#: Different lists of stream names the ranks may hold (beyond it, setup fails).
DISTINCT_NAME_LISTS = 64


def check_group(group: Any) -> None:
    """Refuse, before anything else, a call that cannot say which ranks it meets."""
    import torch.distributed as dist

    if not distributed():
        raise DistributedError("verify is a collective: initialise torch.distributed first")
    if group is None:
        return
    if group is dist.GroupMember.NON_GROUP_MEMBER:
        raise DistributedError(
            f"this rank ({dist.get_rank()}) is not a member of the group given to verify "
            "(torch.distributed.new_group gives ranks outside a group a placeholder): "
            "call verify only on the group's ranks"
        )
    if not isinstance(group, dist.ProcessGroup):
        raise DistributedError(f"group must be a ProcessGroup, got {type(group).__name__}")
    if dist.get_rank(group) < 0:
        raise DistributedError(
            f"this rank ({dist.get_rank()}) is not a member of the group given to verify "
            f"(its ranks: {dist.get_process_group_ranks(group)}): call verify only on "
            "the group's ranks"
        )


def check_arguments(mesh: Any, sharded_dims: Sequence[str] | None) -> tuple[str, ...] | None:
    """Refuse, before any collective, what is wrong in the mesh arguments; the sharded dims."""
    from torch.distributed.device_mesh import DeviceMesh

    if mesh is not None and not isinstance(mesh, DeviceMesh):
        raise MeshError(f"mesh must be a torch DeviceMesh, got {type(mesh).__name__}")
    dims = None
    if sharded_dims is not None:
        dims = check_dim_names(sharded_dims)
        if mesh is None:
            raise MeshError("sharded_dims name dims of a mesh: pass the mesh too")
        if dims and mesh.mesh_dim_names is None:
            raise MeshError("sharded_dims needs a DeviceMesh with mesh_dim_names")
    return dims


def comparison_mesh(mesh: Any, group: Any, plan: Seeding | None) -> Any:
    """The DeviceMesh whose dims ranks are laid out along, or ``None`` to judge one group."""
    import torch.distributed as dist

    if group is not None:
        return None
    if plan is not None and any(d.members is not None for d in plan.dims):
        return None  # process groups are judged by their members, over the whole group
    candidate = mesh if mesh is not None else seeded_mesh()
    if candidate is None or candidate.get_coordinate() is None:
        return None
    if candidate.size() != dist.get_world_size():
        return None
    return candidate


@dataclass(frozen=True)
class Agreed:
    """What one reduction found: whether any rank failed, and which words every rank shares."""

    failed: bool
    same: Mapping[str, bool]


def agree_on(whole: Comm, failed: bool, words: Mapping[str, int]) -> Agreed:
    """One reduction: whether any rank failed, and which named words are the same everywhere."""
    names = list(words)
    values = [words[name] for name in names]
    high = whole.max([int(failed), *values], negated=values)
    maxima, minima = high[1 : 1 + len(names)], high[1 + len(names) :]
    same = {n: a == b for n, a, b in zip(names, maxima, minima, strict=True)}
    return Agreed(bool(high[0]), same)


def name_minority(
    whole: Comm, value: int, what: str, name: Any
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Name the ranks whose ``value`` differs from what most hold (every rank, if none do)."""
    positions, total = whole.odd_ones(value, 16)
    ranks = tuple(whole.global_rank(p) for p in positions)
    named = ", ".join(name(r) for r in ranks)
    more = f" and {total - len(ranks)} more" if total > len(ranks) else ""
    return (f"ranks disagree on {what}: {named}{more}",), ranks


def members_digest(members: Iterable[int]) -> int:
    """A digest of a process group's members."""
    return digest_of(tuple(sorted(members)))


def group_problems(
    whole: Comm, words: list[int], name: Any
) -> tuple[tuple[str, ...], tuple[int, ...]] | None:
    """Each process group of the plan must be held by exactly its members (a gather over all)."""
    rows = whole.gather_rows(words)
    ranks = whole.global_ranks()
    problems: list[str] = []
    offenders: set[int] = set()
    for term in range(len(words)):
        claims: dict[int, list[int]] = {}
        for rank, row in zip(ranks, rows, strict=True):
            claims.setdefault(row[term], []).append(rank)
        for digest, members in claims.items():
            if members_digest(members) != digest:
                offenders.update(members)
                named = ", ".join(name(r) for r in sorted(members))
                problems.append(
                    f"groups[{term}] of {named} is not the group its other members hold "
                    "(a rank seeded with another rank's process group?)"
                )
    return (tuple(problems), tuple(sorted(offenders))) if problems else None


def one_message(items: Sequence[str], too_long: str) -> str:
    """``items`` as one broadcast message; refuses (before any collective) a longer list.

    ``too_long`` is the refusal's text, said when the list does not fit.
    """
    text = json.dumps(list(items))
    if len(text.encode()) > MESSAGE_BYTES:
        raise MeshError(too_long)
    return text


def names_message(names: Sequence[str]) -> str:
    """The stream names as one broadcast message; refuses (before any collective) a longer list."""
    return one_message(
        names,
        f"this rank holds {len(names)} streams, more than verify can tell the others "
        f"about in one message ({MESSAGE_BYTES} bytes of names): pass streams=[...]",
    )


def union_of_names(
    whole: Comm,
    names: Sequence[str],
    message: str,
    *,
    key: Callable[[str], Any] = order,
    what: str = "lists of streams: pass streams=[...] to name the ones to check",
) -> list[str] | str:
    """Every name some rank holds, sorted by ``key`` (the report's order); or why not, in words.

    ``message`` is :func:`names_message` of ``names``, made before any collective.
    One reduction per distinct list of names, and one broadcast from the lowest
    rank holding each (at most :data:`DISTINCT_NAME_LISTS` lists). ``what``
    completes the message of too many lists.
    """
    mine = digest_of(list(names))
    found: set[str] = set()
    last = -1
    for lists in range(DISTINCT_NAME_LISTS + 1):
        pending = mine > last
        high = whole.max([int(pending)], negated=[mine if pending else WORD_LIMIT - 1])
        if not high[0]:
            return sorted(found, key=key)
        if lists == DISTINCT_NAME_LISTS:
            break
        lowest = high[1]
        (holder,) = whole.max([], negated=[whole.rank if mine == lowest else whole.size])
        found.update(json.loads(whole.broadcast_text(message, holder)))
        last = lowest
    return f"ranks hold more than {DISTINCT_NAME_LISTS} different {what}"
