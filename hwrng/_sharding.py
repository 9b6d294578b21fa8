"""Where each shard of a sharded random op draws from: pure offset arithmetic.

A random op on a tensor sharded over a device mesh runs on every rank on the
rank's local shard. :func:`shard_offsets` says, for one rank, at which offset
of the generator its shard starts and by how much every rank's generator
advances afterwards, such that

* offsets are multiples of 4 (the unit of Philox increments);
* replicas of a shard start at the same offset, so they draw the same numbers;
* no two shards' ranges ``[start, start + local numel)`` overlap, so shards
  draw different numbers;
* every range ends at or before ``end_increment``, which is the same on every
  rank and at least the tensor's numel, so the next op overlaps nothing.

These hold for every shape: uneven splits, shards of fewer than 4 elements,
empty shards, and a tensor dim sharded over several mesh dims.

How hwrng differs from torch
----------------------------
torch's ``OffsetBasedRNGTracker`` (``torch/distributed/tensor/_random.py``)
starts shard ``k`` at ``round_up_4(k * first_shard_numel)`` and ends at
``round_up_4(numel)``. Rounding the product, not the stride, lets shards
collide: three elements over four shards start at 0, 4, 4 and 4, so shards 1
and 2 draw identical numbers, and shard 2's range passes the end. For a tensor
dim sharded over two mesh dims it sizes the first shard from the global dim
each time, so its starts run past ``numel`` and the next op re-draws them.
hwrng strides by ``round_up_4(largest shard numel)`` instead:
``start = k * stride`` and ``end = number_of_shards * stride``. Where every
shard has the same numel and that numel is a multiple of 4 -- the common,
well-behaved case -- both give the same offsets, so hwrng draws the same
numbers as torch there.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hwrng._exceptions import InvalidArgumentError, MeshError
from hwrng._mesh import linear_index
from hwrng._validation import check_index, int_tuple

__all__ = ["ShardSpec", "chunk_size", "shard_offsets"]


def _align4(value: int) -> int:
    return (value + 3) // 4 * 4


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


@functools.cache
def _placement_types() -> tuple[type[Any], type[Any], type[Any], type[Any] | None]:
    from torch.distributed.tensor import placement_types

    strided = getattr(placement_types, "_StridedShard", None)
    return placement_types.Shard, placement_types.Replicate, placement_types.Partial, strided


@dataclass(frozen=True)
class ShardSpec:
    """A sharded tensor as one rank sees it: enough to place its random draws.

    Parameters
    ----------
    shape
        The global shape of the tensor.
    mesh_shape
        The size of each mesh dim.
    placements
        One placement per mesh dim: ``torch.distributed.tensor``'s ``Shard(d)``,
        ``Replicate()`` or ``Partial()`` (a partial tensor's values are
        replicated for RNG purposes), or ``_StridedShard``.
    coordinate
        This rank's coordinate in the mesh.

    Raises
    ------
    MeshError
        If placements and mesh have different lengths, a shard dim lies
        outside the tensor, a placement is of an unknown kind, or the
        coordinate lies outside the mesh.
    """

    shape: tuple[int, ...]
    mesh_shape: tuple[int, ...]
    placements: tuple[Any, ...]
    coordinate: tuple[int, ...]
    _layout: tuple[tuple[int, int] | None, ...] = field(
        init=False, repr=False, compare=False, hash=False
    )
    _offsets: tuple[int, int] | None = field(
        init=False, default=None, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        shape = int_tuple(self.shape, "shape")
        mesh_shape = int_tuple(self.mesh_shape, "mesh_shape", minimum=1)
        coordinate = int_tuple(self.coordinate, "coordinate")
        given: object = self.placements
        if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
            raise MeshError(f"placements must be a sequence of placements, got {given!r}")
        placements = tuple(given)
        if len(placements) != len(mesh_shape):
            raise MeshError(
                f"{len(placements)} placements for a {len(mesh_shape)}-dim mesh "
                f"{mesh_shape}: give one placement per mesh dim"
            )
        if len(coordinate) != len(mesh_shape):
            raise MeshError(
                f"coordinate {coordinate} has {len(coordinate)} entries for a "
                f"{len(mesh_shape)}-dim mesh {mesh_shape}"
            )
        for axis, (c, size) in enumerate(zip(coordinate, mesh_shape, strict=True)):
            if c >= size:
                raise MeshError(
                    f"coordinate {coordinate} lies outside the mesh {mesh_shape} "
                    f"(mesh dim {axis} has size {size})"
                )
        layout = tuple(_layout_of(p, len(shape)) for p in placements)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "mesh_shape", mesh_shape)
        object.__setattr__(self, "coordinate", coordinate)
        object.__setattr__(self, "placements", placements)
        object.__setattr__(self, "_layout", layout)

    @classmethod
    def from_dtensor_spec(cls, spec: Any, coordinate: Iterable[int] | None = None) -> ShardSpec:
        """Build a spec from a DTensor's ``DTensorSpec`` (``dtensor._spec``).

        Parameters
        ----------
        spec
            The ``DTensorSpec``: its ``shape``, ``mesh`` and ``placements`` are used.
        coordinate
            The coordinate to describe; by default this rank's
            ``spec.mesh.get_coordinate()``.

        Raises
        ------
        MeshError
            If this rank is not part of the spec's mesh.
        """
        if coordinate is None:
            found = spec.mesh.get_coordinate()
            if found is None:
                raise MeshError("this rank is not part of the DTensor's mesh")
            coordinate = found
        return cls(
            tuple(spec.shape), tuple(spec.mesh.shape), tuple(spec.placements), tuple(coordinate)
        )

    @property
    def numel(self) -> int:
        """The number of elements of the whole tensor."""
        return math.prod(self.shape)

    @property
    def num_shards(self) -> int:
        """The number of distinct shards (replicas counted once)."""
        return math.prod(self._shards_per_dim())

    @property
    def shard_index(self) -> int:
        """The index of this coordinate's shard, numbered row-major over tensor dims."""
        return linear_index(self._shard_position(), self._shards_per_dim())

    @property
    def local_shape(self) -> tuple[int, ...]:
        """The shape of this coordinate's shard, as DTensor splits it."""
        sizes = list(self.shape)
        for placement, layout, c, m in zip(
            self.placements, self._layout, self.coordinate, self.mesh_shape, strict=True
        ):
            if layout is None:
                continue
            dim, split_factor = layout
            if split_factor > 1:
                sizes[dim] = _strided_shard_size(placement, sizes[dim], m, c)
            else:
                sizes[dim] = chunk_size(sizes[dim], m, c)
        return tuple(sizes)

    def _mesh_dims_of(self, tensor_dim: int) -> list[int]:
        return [
            axis
            for axis, layout in enumerate(self._layout)
            if layout is not None and layout[0] == tensor_dim
        ]

    def _shards_per_dim(self) -> list[int]:
        return [
            math.prod(self.mesh_shape[axis] for axis in self._mesh_dims_of(dim))
            for dim in range(len(self.shape))
        ]

    def _shard_position(self) -> list[int]:
        positions = []
        for dim in range(len(self.shape)):
            axes = self._mesh_dims_of(dim)
            positions.append(
                linear_index([self.coordinate[a] for a in axes], [self.mesh_shape[a] for a in axes])
            )
        return positions

    def largest_shard_numel(self) -> int:
        """An upper bound, tight for ``Shard``, on the numel of any shard."""
        sizes = list(self.shape)
        for layout, m in zip(self._layout, self.mesh_shape, strict=True):
            if layout is None:
                continue
            dim, split_factor = layout
            if split_factor > 1:
                sizes[dim] = split_factor * _ceil_div(_ceil_div(sizes[dim], split_factor), m)
            else:
                sizes[dim] = _ceil_div(sizes[dim], m)
        return math.prod(sizes)


def chunk_size(size: int, chunks: int, index: int) -> int:
    """The size of piece ``index`` when ``torch.chunk`` splits ``size`` into ``chunks``."""
    full = _ceil_div(size, chunks)
    return max(0, min(size, full * (index + 1)) - full * index)


def _layout_of(placement: object, ndim: int) -> tuple[int, int] | None:
    shard, replicate, partial, strided = _placement_types()
    if isinstance(placement, (replicate, partial)):
        return None
    is_strided = strided is not None and isinstance(placement, strided)
    if not (is_strided or isinstance(placement, shard)):
        raise MeshError(
            f"unsupported placement {placement!r}: use Shard, Replicate or Partial "
            "from torch.distributed.tensor"
        )
    dim = check_index(placement.dim, f"the dim of {placement!r}", minimum=-ndim)  # type: ignore[attr-defined]
    if dim >= ndim:
        raise MeshError(f"{placement!r} shards dim {dim} of a {ndim}-dim tensor")
    split_factor = 1
    if is_strided:
        split_factor = check_index(
            placement.split_factor,  # type: ignore[attr-defined]
            f"the split_factor of {placement!r}",
            minimum=1,
        )
    return dim % ndim, split_factor


def shard_offsets(spec: ShardSpec) -> tuple[int, int]:
    """Return ``(start_increment, end_increment)`` for one random op on ``spec``.

    Before the op, this rank's generator moves from offset ``o`` to
    ``o + start_increment``; afterwards every rank's generator sits at
    ``o + end_increment``. See the module notes for the guarantees and for
    how these differ from torch's.

    Parameters
    ----------
    spec
        The sharded tensor, as this rank sees it.

    Returns
    -------
    tuple of int
        Both multiples of 4; ``end_increment`` is the same for every coordinate.

    Examples
    --------
    >>> from torch.distributed.tensor import Shard
    >>> shard_offsets(ShardSpec((3,), (4,), (Shard(0),), (2,)))
    (8, 16)
    """
    if not isinstance(spec, ShardSpec):
        raise InvalidArgumentError(f"shard_offsets needs a ShardSpec, got {type(spec).__name__}")
    found = spec._offsets
    if found is None:  # a spec is immutable: compute once, on first use
        stride = _align4(spec.largest_shard_numel())
        found = (spec.shard_index * stride, spec.num_shards * stride)
        object.__setattr__(spec, "_offsets", found)
    return found


def _strided_shard_size(placement: Any, size: int, chunks: int, coordinate: int) -> int:
    """The local size a ``_StridedShard`` gives ``coordinate``, as DTensor computes it.

    torch 2.10 declares ``_StridedShard.local_shard_size_and_offset`` a static method
    that takes the placement explicitly; from 2.11 it is an ordinary method. Which one
    this torch has is read from the class, not from its version.
    """
    method = inspect.getattr_static(type(placement), "local_shard_size_and_offset")
    if isinstance(method, staticmethod):
        return int(placement.local_shard_size_and_offset(placement, size, chunks, coordinate)[0])
    return int(placement.local_shard_size_and_offset(size, chunks, coordinate)[0])
