"""The judged ranks as a grid: the mesh's dims (this rank's group along each), or one group.

:func:`over_mesh` lays the ranks out along every dim of size > 1 of a
DeviceMesh over the whole group -- each axis this rank's line along a dim,
with the group position of every coordinate on it. :func:`over_group`
treats the group as a single axis: what verify does where no mesh covers
the group, at a cost that grows with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hwrng._collectives import Comm
from hwrng._mesh import MeshLayout, mesh_tensor
from hwrng.verify._routing import Place
from hwrng.verify._wire import Line

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from hwrng._platform import Platform

__all__ = ["Topology", "over_group", "over_mesh"]


@dataclass
class Topology:
    """Where this rank sits, its groups along each axis, and how ranks are named."""

    place: Place
    lines: list[Line]
    layout: MeshLayout | None = None
    _names: dict[int, str] = field(default_factory=dict, repr=False)

    def coordinate(self, rank: int) -> dict[str, int] | None:
        """``{'dp': 2, 'tp': 1}``: where ``rank`` sits in the layout, if known."""
        if self.layout is not None:
            found = self.layout.coordinate(rank)
            if found is not None:
                return dict(zip(self.layout.names, found, strict=True))
        return None

    def name(self, rank: int) -> str:
        """``rank 5 {'dp': 2, 'tp': 1}``, or ``rank 5`` where no coordinate is known."""
        coordinate = self.coordinate(rank)
        return f"rank {rank}" if coordinate is None else f"rank {rank} {coordinate}"


def over_mesh(
    mesh: DeviceMesh,
    whole: Comm,
    platform: Platform | None,
    layout: MeshLayout | None = None,
    *,
    timeout: float | None = None,
) -> Topology:
    """Axes along each dim of size > 1 of ``mesh``, which must hold every rank of ``whole``.

    ``timeout`` bounds each collective along a dim (see :class:`~hwrng._collectives.Comm`),
    whatever timeout the mesh's groups were made with.
    """
    import torch.distributed as dist

    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise ValueError("this rank is not in the mesh it is judged over")
    own = MeshLayout.of(mesh)
    axes = [d for d, size in enumerate(mesh.shape) if size > 1]
    lines = []
    for d in axes:
        group = mesh.get_group(d)
        positions: Sequence[int] = range(mesh.shape[d])
        if own.ranks is not None:  # not init_device_mesh's order: look each rank up in its group
            grid = mesh_tensor(mesh).reshape(tuple(mesh.shape))
            index = (*coordinate[:d], slice(None), *coordinate[d + 1 :])
            ranks = grid[index].tolist()
            positions = tuple(int(dist.get_group_rank(group, int(r))) for r in ranks)
        lines.append(Line(Comm(group, platform, timeout=timeout), positions))
    place = Place(
        whole.global_rank(whole.rank),
        whole.rank,
        whole.size,
        tuple(int(mesh.shape[d]) for d in axes),
        tuple(int(coordinate[d]) for d in axes),
    )
    return Topology(place, lines, layout if layout is not None else own)


def over_group(whole: Comm, layout: MeshLayout | None = None) -> Topology:
    """The whole group as one axis (none for a group of one)."""
    rank = whole.global_rank(whole.rank)
    if whole.size == 1:
        return Topology(Place(rank, 0, 1, (), ()), [], layout)
    place = Place(rank, whole.rank, whole.size, (whole.size,), (whole.rank,))
    return Topology(place, [Line(whole, range(whole.size))], layout)
