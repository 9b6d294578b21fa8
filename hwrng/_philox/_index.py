"""Which elements an op computes: global flat indices, and a shard's per-dim description of them.

An element's values depend on its global flat index only (row-major in the
global shape), so a shard that computes its own elements gets the values the
single-device tensor has there, whatever the placement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hwrng._exceptions import InvalidValueError
from hwrng._philox._parameters import checked_index, checked_word

__all__ = [
    "Indices",
    "ShardIndices",
    "check_dim_indices",
    "flat_index",
    "flat_index_of_checked",
    "index_shape",
]


def flat_index(dim_indices: Sequence[torch.Tensor], global_shape: Sequence[int]) -> torch.Tensor:
    """Global flat indices of a local shard, from the global positions it holds along each dim.

    Parameters
    ----------
    dim_indices : sequence of torch.Tensor
        For each dim ``k``, a 1-D integer tensor of the global positions along
        ``k`` held by the shard, in local order: one range for a plain shard,
        several concatenated ranges for a strided shard. All on one device.
    global_shape : sequence of int
        The shape of the whole (global) tensor.

    Returns
    -------
    torch.Tensor
        int64, of shape ``(len(dim_indices[0]), len(dim_indices[1]), ...)``:
        ``sum_k dim_indices[k] * global_stride[k]`` broadcast over the dims
        (row-major strides). A 0-d shape gives the 0-d index ``0``.

    Examples
    --------
    >>> flat_index([torch.tensor([1, 2]), torch.tensor([0, 3])], (3, 4)).tolist()
    [[4, 7], [8, 11]]
    """
    shape, vectors = check_dim_indices(dim_indices, global_shape)
    return flat_index_of_checked(vectors, shape)


def check_dim_indices(
    dim_indices: Sequence[torch.Tensor], global_shape: Sequence[int]
) -> tuple[list[int], list[torch.Tensor]]:
    """The global shape as ints and the index vectors, once checked to describe a shard of it."""
    shape = [checked_word("global_shape entry", int(n), 2**62) for n in global_shape]
    if len(dim_indices) != len(shape):
        raise InvalidValueError(
            f"{len(dim_indices)} index vectors for a {len(shape)}-dimensional global shape"
        )
    if math.prod(shape) >= 2**62:
        raise InvalidValueError(f"global shape {tuple(shape)} has too many elements")
    vectors = [checked_index(v, f"dim_indices[{k}]") for k, v in enumerate(dim_indices)]
    for axis, vector in enumerate(vectors):
        if vector.dim() != 1:
            raise InvalidValueError(
                f"dim_indices[{axis}] must be 1-D, got shape {tuple(vector.shape)}"
            )
        if vector.numel():
            low, high = torch.aminmax(vector)
            if int(low) < 0 or int(high) >= shape[axis]:
                raise InvalidValueError(
                    f"dim_indices[{axis}] must lie in [0, {shape[axis]}), "
                    f"got [{int(low)}, {int(high)}]"
                )
    return shape, vectors


def flat_index_of_checked(vectors: Sequence[torch.Tensor], shape: Sequence[int]) -> torch.Tensor:
    """:func:`flat_index` for vectors and a shape already checked by :func:`check_dim_indices`."""
    if not shape:
        return torch.zeros((), dtype=torch.int64)
    total: torch.Tensor | None = None
    stride = 1
    for axis in range(len(shape) - 1, -1, -1):
        view = [1] * len(shape)
        view[axis] = -1
        term = (vectors[axis] * stride).reshape(view)
        total = term if total is None else total + term
        stride *= shape[axis]
    assert total is not None
    return total.expand(*(v.numel() for v in vectors)).contiguous()


#: per dim, the runs ``(start, length)`` of consecutive global positions a shard holds
Ranges = tuple[tuple[tuple[int, int], ...], ...]


@dataclass(frozen=True, eq=False)
class ShardIndices:
    """A shard's global indices, as one global index vector per dim (see :func:`flat_index`).

    The random ops accept it wherever they accept an index tensor: the fused
    Triton kernel reads this description directly (on CUDA, where Triton
    imports); elsewhere the ops materialise :meth:`flat`, or draw run by run.

    ``ranges``, when given, says the same on the host: per dim, the runs
    ``(start, length)`` of consecutive global positions whose concatenation is
    that dim's vector (what :mod:`hwrng.invariant` computes from a
    ``ShardSpec``). The ops then read the shard's structure from it, without
    reading the vectors back from their device.
    """

    dims: tuple[torch.Tensor, ...]
    shape: tuple[int, ...]
    ranges: Ranges | None = None

    @property
    def device(self) -> torch.device:
        """Where the indices live."""
        return self.dims[0].device if self.dims else torch.device("cpu")

    def flat(self) -> torch.Tensor:
        """The global flat index of every element, in the shard's shape."""
        return flat_index(self.dims, self.shape)

    def check(self) -> None:
        """Raise unless the description is one of a shard of ``shape`` (see :func:`flat_index`)."""
        if self.ranges is None:
            check_dim_indices(self.dims, self.shape)
            return
        shape = [checked_word("global_shape entry", int(n), 2**62) for n in self.shape]
        if not len(self.dims) == len(self.ranges) == len(shape):
            raise InvalidValueError(
                f"{len(self.dims)} index vectors and {len(self.ranges)} range lists for a "
                f"{len(shape)}-dimensional global shape"
            )
        if math.prod(shape) >= 2**62:
            raise InvalidValueError(f"global shape {tuple(shape)} has too many elements")
        for axis, (vector, runs) in enumerate(zip(self.dims, self.ranges, strict=True)):
            if vector.dim() != 1 or vector.numel() != sum(length for _, length in runs):
                raise InvalidValueError(
                    f"dim_indices[{axis}] (shape {tuple(vector.shape)}) is not the positions "
                    f"of its ranges {runs}"
                )
            for start, length in runs:
                if start < 0 or length < 0 or start + length > shape[axis]:
                    raise InvalidValueError(
                        f"dim_indices[{axis}] must lie in [0, {shape[axis]}), got the range "
                        f"[{start}, {start + length})"
                    )

    def dim_range(self, axis: int) -> tuple[int, int] | None:
        """``(start, length)`` if dim ``axis`` is one range of consecutive positions, else None."""
        if self.ranges is not None:
            merged: list[tuple[int, int]] = []
            for start, length in self.ranges[axis]:
                if length == 0:
                    continue
                if merged and merged[-1][0] + merged[-1][1] == start:
                    merged[-1] = (merged[-1][0], merged[-1][1] + length)
                else:
                    merged.append((start, length))
            return merged[0] if len(merged) == 1 else None
        vector = self.dims[axis]
        if vector.numel() == 0:
            return None
        first = int(vector[0])
        return (first, vector.numel()) if _is_range(vector, first, vector.numel()) else None

    def run_layout(self) -> tuple[int, int, int]:
        """The shard as runs of consecutive global indices: ``(outer, first, length)``.

        The shard's elements, in its order, are runs of ``length`` consecutive
        global indices; run ``r`` starts at ``first + sum_k dims[k][j_k] *
        stride_k`` over the first ``outer`` dims, ``(j_0, ..., j_{outer-1})``
        the multi-index of ``r`` in those dims (row-major strides of
        ``shape``). Trailing dims held whole merge into the runs, and so does
        the dim before them when it holds one range; else the runs are as long
        as the whole trailing dims (1 when the last dim is scattered).
        """
        shape = self.shape
        inner, k = 1, len(shape)
        while k and self.dim_range(k - 1) == (0, shape[k - 1]):
            inner *= shape[k - 1]
            k -= 1
        if k == 0:
            return 0, 0, inner
        held = self.dim_range(k - 1)
        if held is None:
            return k, 0, inner
        return k - 1, held[0] * inner, held[1] * inner

    def runs(self, most: int = 4096) -> list[tuple[int, int]] | None:
        """The shard's elements as runs of consecutive global indices, in the shard's order.

        Returns ``(start, length)`` pairs, all of one length, whose
        concatenation is :meth:`flat` -- found from the per-dim vectors alone,
        without building the shard's index tensor -- or ``None`` when the
        shard is not such runs, or would take more than ``most`` of them.
        (A row-sharded tensor is one run; a column shard, one run a row.)
        """
        outer, first, length = self.run_layout()
        count = math.prod(v.numel() for v in self.dims[:outer])
        if count > most or length == 0:
            return None
        if outer == 0:
            return [(first, length)]
        starts = flat_index(list(self.dims[:outer]), self.shape[:outer]).reshape(-1).tolist()
        row = math.prod(self.shape[outer:])
        return [(o * row + first, length) for o in starts]


def _is_range(vector: torch.Tensor, start: int, length: int) -> bool:
    """Whether the 1-D ``vector`` is ``start, start + 1, ..., start + length - 1``."""
    if vector.numel() != length or length == 0:
        return False
    if int(vector[0]) != start or int(vector[-1]) != start + length - 1:
        return False
    return length <= 2 or torch.equal(
        vector, torch.arange(start, start + length, dtype=vector.dtype, device=vector.device)
    )


#: what the random ops take: global flat indices, or a shard's per-dim description
Indices = torch.Tensor | ShardIndices


def index_shape(index: Indices) -> tuple[int, ...]:
    """The shape of the values an op draws for ``index``."""
    if isinstance(index, ShardIndices):
        return tuple(v.numel() for v in index.dims)
    return tuple(index.shape)
