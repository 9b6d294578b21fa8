"""Mesh arithmetic: dim sizes, the one linear index, and a mesh's rank layout.

Everything in hwrng that turns a coordinate into a number -- a rank's seed,
a shard's index -- goes through :func:`linear_index` (the first dim varies
slowest, as in C order and in the PyTorch RFC's seed formula).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hwrng._exceptions import MeshError
from hwrng._validation import check_index

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = [
    "MeshLayout",
    "check_sizes",
    "linear_index",
    "mesh_ranks",
    "mesh_sizes",
    "mesh_tensor",
    "require_known",
    "strides",
    "unravel_index",
]


def strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides of ``sizes``: the first dim varies slowest."""
    result = [1] * len(sizes)
    for position in range(len(sizes) - 2, -1, -1):
        result[position] = result[position + 1] * sizes[position + 1]
    return tuple(result)


def linear_index(coordinate: Sequence[int], sizes: Sequence[int]) -> int:
    """The row-major index of ``coordinate`` in a grid of ``sizes`` (first dim slowest).

    Examples
    --------
    >>> linear_index((1, 0, 1), (2, 2, 2))
    5
    """
    return sum(c * s for c, s in zip(coordinate, strides(sizes), strict=True))


def unravel_index(position: int, sizes: Sequence[int]) -> tuple[int, ...]:
    """The coordinate at row-major ``position`` of a grid of ``sizes`` (exact for any size).

    Examples
    --------
    >>> unravel_index(5, (2, 2, 2))
    (1, 0, 1)
    """
    coordinate = []
    for size in reversed(sizes):
        position, digit = divmod(position, size)
        coordinate.append(digit)
    return tuple(reversed(coordinate))


def check_sizes(sizes: object) -> dict[str, int]:
    """Return a mapping of dim name to size after checking every size is a positive int."""
    if not isinstance(sizes, Mapping):
        raise MeshError(f"mesh sizes must map dim name to size, got {type(sizes).__name__}")
    checked: dict[str, int] = {}
    for name, size in sizes.items():
        if not isinstance(name, str):
            raise MeshError(f"mesh dims must be named by strings, got {name!r}")
        try:
            checked[name] = check_index(size, f"mesh dim {name!r}", minimum=1)
        except MeshError:
            raise MeshError(
                f"mesh dim {name!r} must have a positive integer size, got {size!r}"
            ) from None
    return checked


def require_known(dims: Sequence[str], known: Sequence[str], what: str = "sharded dim(s)") -> None:
    """Refuse dim names that are not among ``known``."""
    unknown = [dim for dim in dims if dim not in known]
    if unknown:
        raise MeshError(
            f"{what} {', '.join(map(repr, unknown))} not in the mesh "
            f"(its dims: {', '.join(map(repr, known)) or 'none'})"
        )


def _is_device_mesh(mesh: object) -> bool:
    from torch.distributed.device_mesh import DeviceMesh

    return isinstance(mesh, DeviceMesh)


def mesh_dim_names(mesh: DeviceMesh) -> tuple[str, ...]:
    """The dim names of a DeviceMesh; an unnamed mesh's dims are ``dim0``, ``dim1``, ..."""
    names = mesh.mesh_dim_names
    if names is None:
        return tuple(f"dim{i}" for i in range(mesh.ndim))
    return tuple(names)


def mesh_tensor(mesh: DeviceMesh) -> Any:
    """The global ranks of a DeviceMesh as a flat int64 array (read for real while tracing)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():  # under torch.compile the mesh tensor is a real one
        return mesh.mesh.flatten().contiguous().numpy()


def mesh_ranks(mesh: DeviceMesh) -> tuple[int, ...]:
    """The global ranks of a DeviceMesh, row-major (a tuple as long as the mesh)."""
    return tuple(int(r) for r in mesh_tensor(mesh).tolist())


def mesh_sizes(mesh: object) -> dict[str, int]:
    """Dim sizes of a mapping (``{"dp": 2, "tp": 4}``) or of a DeviceMesh."""
    if isinstance(mesh, Mapping):
        return check_sizes(mesh)
    if _is_device_mesh(mesh):
        device_mesh: Any = mesh
        return dict(zip(mesh_dim_names(device_mesh), device_mesh.shape, strict=True))
    raise MeshError(
        f"mesh must be a mapping of dim name to size or a DeviceMesh, got {type(mesh).__name__}"
    )


@dataclass(frozen=True)
class MeshLayout:
    """Which global rank sits at each coordinate of a mesh.

    Attributes
    ----------
    names
        The dim names, slowest first.
    shape
        The size of each dim.
    ranks
        The global ranks in row-major order of the coordinates, or ``None`` when
        rank ``r`` sits at position ``r`` (a mesh built by ``init_device_mesh``).
    """

    names: tuple[str, ...]
    shape: tuple[int, ...]
    ranks: tuple[int, ...] | None = None
    _positions: dict[int, int] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @classmethod
    def of(cls, mesh: DeviceMesh) -> MeshLayout:
        """The layout of a DeviceMesh (its dim names and the ranks of its mesh tensor).

        A mesh whose position ``r`` holds rank ``r`` (what ``init_device_mesh``
        builds) is recognised without listing its ranks, so the layout of a
        world-sized mesh stays a few words.
        """
        import torch
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():  # under torch.compile the mesh tensor is a real one
            flat = mesh.mesh.flatten()
            identity = torch.equal(flat, torch.arange(flat.numel(), dtype=flat.dtype))
            ranks = None if identity else tuple(int(r) for r in flat.tolist())
        return cls(mesh_dim_names(mesh), tuple(mesh.shape), ranks)

    @property
    def size(self) -> int:
        """The number of ranks in the mesh."""
        return math.prod(self.shape)

    def position(self, rank: int) -> int | None:
        """The row-major position of global ``rank`` in the mesh, or ``None`` if absent."""
        if self.ranks is None:
            return rank if 0 <= rank < self.size else None
        if not self._positions:
            self._positions.update((r, p) for p, r in enumerate(self.ranks))
        return self._positions.get(rank)

    def coordinate(self, rank: int) -> tuple[int, ...] | None:
        """The coordinate of global ``rank``, or ``None`` if it is not in the mesh."""
        position = self.position(rank)
        if position is None:
            return None
        return unravel_index(position, self.shape)

    def to_dict(self) -> dict[str, Any]:
        """Plain values for a checkpoint."""
        return {
            "names": list(self.names),
            "shape": list(self.shape),
            "ranks": None if self.ranks is None else list(self.ranks),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MeshLayout:
        """Rebuild a layout from :meth:`to_dict`."""
        ranks = data["ranks"]
        return cls(
            tuple(str(n) for n in data["names"]),
            tuple(int(s) for s in data["shape"]),
            None if ranks is None else tuple(int(r) for r in ranks),
        )

    def describe(self) -> str:
        """``dp=2 x tp=4``."""
        return " x ".join(f"{n}={s}" for n, s in zip(self.names, self.shape, strict=True))
