"""Which DeviceMeshes this process ran DTensor random ops on, under the seed plan in force.

The DTensor adapter notes each op's mesh (:func:`note`); :func:`hwrng.verify`
reads them (:func:`meshes_in_use`) to judge the DTensor stream per mesh: in a
pipeline-parallel job each stage runs its own ops on its own submesh, so only
ranks that ran ops on the same meshes are expected to sit at the same offset.
The record belongs to one plan: a new plan (a new ``manual_seed``) starts it afresh.
"""

from __future__ import annotations

import threading
from typing import Any

from hwrng._mesh import mesh_ranks
from hwrng._plan import Seeding
from hwrng._seeding import current_seeding

__all__ = ["meshes_in_use", "note"]

_lock = threading.Lock()
_plan: list[Seeding | None] = [None]
# id(mesh) -> (mesh, its ranks): keeps the mesh alive so its id is never reused
_known: dict[int, tuple[Any, tuple[int, ...]]] = {}
# ranks -> the latest mesh object over those ranks, noted under _plan[0]
_used: dict[tuple[int, ...], Any] = {}
_LIMIT = 1024


def note(mesh: Any) -> None:
    """Record that a DTensor random op ran on ``mesh`` (cheap: a dict lookup per op)."""
    seeding = current_seeding()
    entry = _known.get(id(mesh))
    fresh = entry is not None and entry[0] is mesh and _plan[0] is seeding
    if fresh and entry is not None and _used.get(entry[1]) is mesh:
        return  # the common case: nothing new, no lock
    if entry is None or entry[0] is not mesh:
        entry = (mesh, mesh_ranks(mesh))
        with _lock:
            if len(_known) >= _LIMIT:
                _known.clear()
            _known[id(mesh)] = entry
    with _lock:
        if _plan[0] is not seeding:
            _plan[0] = seeding
            _used.clear()
        if len(_used) < _LIMIT or entry[1] in _used:
            _used[entry[1]] = mesh


def meshes_in_use() -> list[Any]:
    """The meshes DTensor random ops ran on under the plan in force, ordered by their ranks."""
    with _lock:
        if _plan[0] is not current_seeding():
            return []
        return [_used[ranks] for ranks in sorted(_used)]
