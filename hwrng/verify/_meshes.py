"""DTensor meshes as grids of global ranks: which mesh of a kind some rank used holds this rank.

A rank that ran no DTensor random op on a mesh it belongs to (or re-seeded
since) holds no record of it, yet its next op there draws from where its
generator sits: verify must observe it like the ranks that did. It cannot
know the mesh from its own records, so ranks tell one another the *kinds* of
mesh they used -- never lists of ranks, which grow with the world.

A mesh's ranks, as a set, almost always form a grid of global ranks: a start
and a few ``(size, stride)`` dims, as every submesh of a mesh built by
``init_device_mesh`` does (``mesh["tp"]`` of dp x tp: ``(tp, 1)`` from the
first rank of each dp row). The dims are its *kind* (:func:`kind_of`), the
same for each instance -- each pipeline stage's mesh, each dp row's tp mesh
-- and every rank lies in exactly one instance of a kind, the one
:func:`instance_of` names, found from the rank alone. A mesh whose ranks form
no such grid is *irregular*: its members that hold no record of it cannot be
found, and verify says so.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence

__all__ = ["IRREGULAR", "instance_of", "kind_of", "rank_set"]

#: The kind of a mesh whose ranks form no grid.
IRREGULAR = "irregular"


def rank_set(ranks: Iterable[int]) -> tuple[int, ...]:
    """A mesh's ranks as a set: sorted, each once (the order of its dims does not matter)."""
    return tuple(sorted({int(r) for r in ranks}))


def _dims(offsets: Sequence[int]) -> list[tuple[int, int]] | None:
    """``(size, stride)`` dims, innermost first, whose grid from 0 is ``offsets`` (sorted)."""
    dims: list[tuple[int, int]] = []
    current = list(offsets)
    while len(current) > 1:
        stride = current[1]
        size = 1
        while size < len(current) and current[size] == size * stride:
            size += 1
        if len(current) % size:
            return None
        starts = current[::size]
        for block, start in enumerate(starts):
            if current[block * size : (block + 1) * size] != [
                start + i * stride for i in range(size)
            ]:
                return None
        dims.append((size, stride))
        current = starts
    return dims


def _start(rank: int, dims: Sequence[tuple[int, int]]) -> int:
    """The first rank of the instance of ``dims`` that holds ``rank``."""
    return rank - sum(((rank // stride) % size) * stride for size, stride in dims)


def kind_of(ranks: Sequence[int]) -> str:
    """The kind of a mesh over ``ranks`` (a :func:`rank_set` of two ranks or more).

    JSON of its ``(size, stride)`` dims, outermost first, or :data:`IRREGULAR`
    where the ranks form no grid in which each rank's own instance can be
    found from the rank alone (each member's instance must be this mesh).
    """
    dims = _dims([r - ranks[0] for r in ranks])
    if dims is None or any(_start(r, dims) != ranks[0] for r in ranks):
        return IRREGULAR
    return json.dumps([list(d) for d in reversed(dims)])


def instance_of(rank: int, kind: str) -> tuple[int, ...]:
    """The ranks (a :func:`rank_set`) of the mesh of ``kind`` that holds ``rank``."""
    dims = [(int(size), int(stride)) for size, stride in json.loads(kind)]
    start = _start(rank, dims)
    steps = [[i * stride for i in range(size)] for size, stride in dims]
    return rank_set(start + sum(offset) for offset in itertools.product(*steps))
