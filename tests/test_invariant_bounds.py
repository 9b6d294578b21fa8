"""Invariant ops do work and use memory in proportion to the local shard, never the global
tensor, and refuse before the generator moves (issue 17, item 10)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard

import hwrng
from hwrng import invariant

SHARD = 2**17
GLOBAL = 2**27

_MEASURE = textwrap.dedent(
    """
    import resource, sys, torch, hwrng
    from hwrng import invariant
    from torch.distributed.tensor import Shard

    op = getattr(invariant, sys.argv[1])
    hwrng.seed_everything(1, platform="cpu")
    # The same op once, small, so that lazy initialisation is not counted.
    op(torch.empty(128), hwrng.ShardSpec((4096,), (32,), (Shard(0),), (3,)), platform="cpu")
    spec = hwrng.ShardSpec(({global_},), ({shards},), (Shard(0),), (5,))
    out = torch.empty({shard})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    op(out, spec, platform="cpu")
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((after - before) * 1024)  # ru_maxrss is in KiB on Linux
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KiB: Linux")
@pytest.mark.parametrize("op", ["uniform_", "normal_", "bernoulli_", "trunc_normal_"])
def test_peak_memory_is_a_small_multiple_of_the_shard(op: str) -> None:
    """A 2**17-element shard of a 2**27-element tensor, in a fresh process: the peak resident
    memory grows by at most 64 float64 copies of the shard (measured: 6 MB for uniform_,
    30 MB for trunc_normal_); an index over the global dim alone would be 1 GiB."""
    script = _MEASURE.format(global_=GLOBAL, shards=GLOBAL // SHARD, shard=SHARD)
    result = subprocess.run(
        [sys.executable, "-c", script, op],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ),
        timeout=600,
    )
    growth = int(result.stdout.split()[-1])
    assert growth <= 64 * 8 * SHARD, f"{op}: peak memory grew by {growth:,} bytes"


def test_a_tiny_shard_of_a_huge_tensor(cpu: hwrng.Platform) -> None:
    """4 elements of a 2**36-element tensor: the values a whole 32-element tensor drawn at the
    same position has at global indices 28..31 (values depend on the index, not the shape)."""
    hwrng.seed_everything(1, platform=cpu)
    whole = invariant.uniform_(torch.empty(32), hwrng.ShardSpec((32,), (1,), (Replicate(),), (0,)))
    hwrng.seed_everything(1, platform=cpu)
    spec = hwrng.ShardSpec((2**36,), (2**34,), (Shard(0),), (7,))
    part = invariant.uniform_(torch.empty(4), spec)
    assert torch.equal(part, whole[28:])
    assert cpu.counter.peek(torch.default_generator)[1] == 2**36, "moved by the global size"


def test_a_refused_op_leaves_the_generator_where_it_was(cpu: hwrng.Platform) -> None:
    """A (1, 1, 1) shard of a 2**62-element shape is refused before the generator moves."""
    hwrng.seed_everything(1, platform=cpu)
    before = cpu.counter.peek(torch.default_generator)
    shape = (2**21, 2**21, 2**20)
    spec = hwrng.ShardSpec(shape, shape, (Shard(0), Shard(1), Shard(2)), (0, 0, 0))
    assert spec.local_shape == (1, 1, 1)
    with pytest.raises(hwrng.InvalidValueError, match="too many elements"):
        invariant.uniform_(torch.empty(1, 1, 1), spec)
    assert cpu.counter.peek(torch.default_generator) == before


# -- the shard's global indices against an oracle that slices the whole index tensor ---------


Case = tuple[tuple[int, ...], tuple[int, ...], list[Any], tuple[int, ...]]


def _oracle(case: Case) -> torch.Tensor:
    """The global flat indices of the shard, by torch.chunk of the whole index tensor as
    DTensor splits it (a _StridedShard: chunk into split_factor pieces, then each piece)."""
    shape, mesh, layout, coordinate = case
    index = torch.arange(math.prod(shape)).reshape(shape)
    for placement, size, c in zip(layout, mesh, coordinate, strict=True):
        if isinstance(placement, _StridedShard):
            chunks = _torch_chunks(index, placement.split_factor, placement.dim)
            pieces = [_torch_chunks(p, size, placement.dim)[c] for p in chunks]
            index = torch.cat(pieces, placement.dim)
        elif isinstance(placement, Shard):
            index = _torch_chunks(index, size, placement.dim)[c]
    return index


def _torch_chunks(tensor: torch.Tensor, count: int, dim: int) -> list[torch.Tensor]:
    """torch.chunk, padded with empty pieces to ``count`` (as DTensor's Shard does)."""
    pieces = list(torch.chunk(tensor, count, dim))
    empty_shape = list(tensor.shape)
    empty_shape[dim] = 0
    pieces += [tensor.new_empty(empty_shape)] * (count - len(pieces))
    return pieces


@st.composite
def _layouts(draw: st.DrawFn) -> Case:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim)))
    mesh_ndim = draw(st.integers(1, 3))
    mesh = tuple(draw(st.lists(st.integers(1, 4), min_size=mesh_ndim, max_size=mesh_ndim)))
    layout: list[Any] = []
    for _ in mesh:
        kind = draw(st.sampled_from(["R", "S", "SS"]))
        dim = draw(st.integers(0, ndim - 1))
        if kind == "R":
            layout.append(Replicate())
        elif kind == "S":
            layout.append(Shard(dim))
        else:
            layout.append(_StridedShard(dim, split_factor=draw(st.integers(1, 3))))
    coordinate = tuple(draw(st.integers(0, size - 1)) for size in mesh)
    return shape, mesh, layout, coordinate


@settings(max_examples=200, deadline=None)
@given(_layouts())
def test_global_index_matches_slicing_the_whole_tensor(case: Case) -> None:
    shape, mesh, layout, coordinate = case
    spec = hwrng.ShardSpec(shape, mesh, tuple(layout), coordinate)
    expected = _oracle(case)
    got = invariant.global_index(spec)
    assert tuple(got.shape) == spec.local_shape == tuple(expected.shape)
    assert torch.equal(got, expected)
