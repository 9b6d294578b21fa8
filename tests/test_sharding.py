"""shard_offsets: the rules of DESIGN.md as properties, and how hwrng differs from torch."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from helpers import held_indices
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor._random import OffsetBasedRNGTracker, _PhiloxState
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import _StridedShard

import hwrng
from hwrng import ShardSpec, shard_offsets


@st.composite
def specs(
    draw: st.DrawFn, max_mesh_dims: int = 3
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Any, ...]]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim)))
    mesh_shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=max_mesh_dims)))
    placements = tuple(
        draw(
            st.one_of(
                st.just(Replicate()), st.just(Partial()), st.builds(Shard, st.integers(0, ndim - 1))
            )
        )
        for _ in mesh_shape
    )
    return shape, mesh_shape, placements


@settings(max_examples=300, deadline=None)
@given(specs())
def test_offsets_obey_the_rules(
    case: tuple[tuple[int, ...], tuple[int, ...], tuple[Any, ...]],
) -> None:
    shape, mesh_shape, placements = case
    seen: dict[frozenset[int], int] = {}
    ranges: list[tuple[int, int]] = []
    ends = set()
    for coordinate in itertools.product(*(range(m) for m in mesh_shape)):
        spec = ShardSpec(shape, mesh_shape, placements, coordinate)
        start, end = shard_offsets(spec)
        held = held_indices(shape, mesh_shape, placements, coordinate)
        assert math.prod(spec.local_shape) == len(held)
        assert start % 4 == 0 and end % 4 == 0
        assert start + len(held) <= end, "every shard's range ends by end_increment"
        ends.add(end)
        if held in seen:
            assert seen[held] == start, "replicas of a shard start at the same offset"
        elif held:
            seen[held] = start
            ranges.append((start, start + len(held)))
    assert len(ends) == 1, "end_increment is the same on every coordinate"
    assert ends.pop() >= math.prod(shape), "end_increment covers the whole tensor"
    ranges.sort()
    for (_, end_a), (start_b, _) in itertools.pairwise(ranges):
        assert end_a <= start_b, "no two shards' ranges overlap"


@settings(max_examples=150, deadline=None)
@given(specs())
def test_local_shape_matches_torch(
    case: tuple[tuple[int, ...], tuple[int, ...], tuple[Any, ...]],
) -> None:
    shape, mesh_shape, placements = case
    for coordinate in itertools.product(*(range(m) for m in mesh_shape)):
        expected, _ = _compute_local_shape_and_global_offset(
            shape, mesh_shape, list(coordinate), placements
        )
        assert ShardSpec(shape, mesh_shape, placements, coordinate).local_shape == tuple(expected)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 40), split=st.integers(1, 4), fsdp=st.integers(1, 4), tp=st.integers(1, 4))
def test_strided_shard_bound_and_distinct_starts(n: int, split: int, fsdp: int, tp: int) -> None:
    """FSDP2 + TP lays one dim out with _StridedShard on the FSDP dim and Shard on the TP dim."""
    placements = (_StridedShard(0, split_factor=split), Shard(0))
    starts: dict[tuple[int, ...], int] = {}
    for coordinate in itertools.product(range(fsdp), range(tp)):
        spec = ShardSpec((n, 3), (fsdp, tp), placements, coordinate)
        local, _ = _compute_local_shape_and_global_offset(
            (n, 3), (fsdp, tp), list(coordinate), placements
        )
        assert math.prod(local) <= spec.largest_shard_numel()
        assert spec.local_shape == tuple(local)
        starts[coordinate] = shard_offsets(spec)[0]
    if n:
        assert len(set(starts.values())) == fsdp * tp


def test_examples_from_the_docs() -> None:
    assert shard_offsets(ShardSpec((3,), (4,), (Shard(0),), (2,))) == (8, 16)
    assert shard_offsets(ShardSpec((8, 16), (2,), (Replicate(),), (1,))) == (0, 128)
    spec = ShardSpec((8, 16), (2, 2, 2), (Shard(1), Replicate(), Shard(0)), (1, 0, 1))
    assert spec.num_shards == 4 and spec.local_shape == (4, 8)
    assert shard_offsets(spec) == (3 * 32, 128)
    empty = ShardSpec((0, 5), (3,), (Shard(1),), (2,))
    assert shard_offsets(empty) == (0, 0)


def test_negative_shard_dims_are_normalised() -> None:
    a = ShardSpec((6, 4), (2,), (Shard(-1),), (1,))
    b = ShardSpec((6, 4), (2,), (Shard(1),), (1,))
    assert shard_offsets(a) == shard_offsets(b) and a.local_shape == (6, 2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (((4,), (2,), (Shard(1),), (0,)), "shards dim 1 of a 1-dim tensor"),
        (((4,), (2, 2), (Shard(0),), (0, 0)), "1 placements for a 2-dim mesh"),
        (((4,), (2,), (Shard(0),), (2,)), "lies outside the mesh"),
        (((4,), (2,), (Shard(0),), (0, 0)), "coordinate \\(0, 0\\) has 2 entries"),
        (((4,), (0,), (Shard(0),), (0,)), "mesh_shape must hold integers >= 1"),
        (((-1,), (2,), (Shard(0),), (0,)), "shape must hold integers >= 0"),
        (((4,), (2,), ("Shard(0)",), (0,)), "unsupported placement"),
        (((4,), (2,), (Shard(0),), "0"), "sequence of integers"),
        (((4,), (2,), (Shard(0),), (0.5,)), "sequence of integers"),
        (((True,), (2,), (Shard(0),), (0,)), "sequence of integers"),
    ],
)
def test_bad_specs_refused(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(hwrng.MeshError, match=message):
        ShardSpec(*args)


def test_shard_offsets_needs_a_spec() -> None:
    with pytest.raises(TypeError, match="needs a ShardSpec"):
        shard_offsets((4, 2))  # type: ignore[arg-type]


# -- torch's own arithmetic, run for real on a stand-in of a DTensorSpec ------------


def torch_offsets(
    shape: tuple[int, ...],
    mesh_shape: tuple[int, ...],
    placements: tuple[Any, ...],
    coordinate: tuple[int, ...],
) -> tuple[int, int]:
    """The ``(start, end)`` offsets torch's own tracker gives this shard.

    torch >= 2.12 computes them in ``_compute_rng_offsets``; torch 2.10 and 2.11 compute the
    same arithmetic inside the region's pre- and post-op steps, on a Philox state: read
    from there, so every comparison runs against the installed torch's own code.
    """
    mesh = SimpleNamespace(
        ndim=len(mesh_shape),
        shape=mesh_shape,
        size=lambda i: mesh_shape[i],
        _sym_get_coordinate=lambda i: coordinate[i],
        get_coordinate=lambda: list(coordinate),
    )
    spec = SimpleNamespace(mesh=mesh, placements=placements, shape=shape, ndim=len(shape))
    tracker = OffsetBasedRNGTracker.__new__(OffsetBasedRNGTracker)
    if hasattr(tracker, "_compute_rng_offsets"):
        start, end = tracker._compute_rng_offsets(spec)
        return int(start), int(end)
    state = _PhiloxState(torch.zeros(16, dtype=torch.uint8))
    tracker._set_pre_op_offset(state, spec)
    start = int(state.offset)
    tracker._set_post_op_offset(state, spec, 0)
    return start, int(state.offset)


def test_torch_offsets_reads_this_torchs_own_code() -> None:
    """Which of torch's two homes of the arithmetic this torch has (2.10-2.11 or >= 2.12)."""
    tracker = OffsetBasedRNGTracker.__new__(OffsetBasedRNGTracker)
    has_method = hasattr(tracker, "_compute_rng_offsets")
    assert has_method or hasattr(tracker, "_set_pre_op_offset")
    assert torch_offsets((8,), (2,), (Shard(0),), (1,)) == (4, 8)


@settings(max_examples=150, deadline=None)
@given(specs(max_mesh_dims=2), st.integers(1, 3))
def test_same_as_torch_where_shards_are_even_and_aligned(
    case: tuple[tuple[int, ...], tuple[int, ...], tuple[Any, ...]], scale: int
) -> None:
    """Where every shard has one numel, a multiple of 4, and no tensor dim is sharded twice."""
    shape, mesh_shape, placements = case
    shape = tuple(4 * scale * math.prod(mesh_shape) * max(1, s) for s in shape)
    sharded = [p.dim for p in placements if isinstance(p, Shard)]
    if len(sharded) != len(set(sharded)):
        return
    for coordinate in itertools.product(*(range(m) for m in mesh_shape)):
        spec = ShardSpec(shape, mesh_shape, placements, coordinate)
        assert shard_offsets(spec) == torch_offsets(shape, mesh_shape, placements, coordinate)


def test_torch_gives_two_tiny_shards_the_same_numbers() -> None:
    """Three elements over four shards: torch starts shards 1 and 2 both at offset 4."""
    placements = (Shard(0),)
    torch_starts = [torch_offsets((3,), (4,), placements, (c,))[0] for c in range(4)]
    assert torch_starts == [0, 4, 4, 4]
    assert torch_offsets((3,), (4,), placements, (0,))[1] == 4  # and shard 2's range passes the end
    hwrng_starts = [shard_offsets(ShardSpec((3,), (4,), placements, (c,)))[0] for c in range(4)]
    assert hwrng_starts == [0, 4, 8, 12]


def test_torch_runs_past_its_end_when_one_dim_is_sharded_twice() -> None:
    """Eight elements over a 2x2 mesh, both mesh dims sharding dim 0: shards of 2."""
    placements = (Shard(0), Shard(0))
    coordinates = list(itertools.product(range(2), range(2)))
    torch_results = [torch_offsets((8,), (2, 2), placements, c) for c in coordinates]
    assert [start for start, _ in torch_results] == [0, 4, 8, 12]
    assert {end for _, end in torch_results} == {8}  # shards 2 and 3 draw past the end
    ours = [shard_offsets(ShardSpec((8,), (2, 2), placements, c)) for c in coordinates]
    assert ours == [(0, 16), (4, 16), (8, 16), (12, 16)]  # stride round_up_4(2) = 4


def test_one_shot_iterables_are_read_once() -> None:
    spec = hwrng.ShardSpec(map(int, ["10", "6"]), (2,), (Replicate(),), (0,))  # type: ignore[arg-type]
    assert spec.shape == (10, 6) and hwrng.shard_offsets(spec) == (0, 60)
    spec = hwrng.ShardSpec((8,), iter([2]), iter([Shard(0)]), (x for x in [1]))  # type: ignore[arg-type]
    assert spec.local_shape == (4,) and spec.placements == (Shard(0),)


@pytest.mark.parametrize("split_factor", [0, -2])
def test_strided_shard_needs_a_positive_split_factor(split_factor: int) -> None:
    with pytest.raises(hwrng.MeshError, match="split_factor"):
        hwrng.ShardSpec((8,), (2,), (_StridedShard(0, split_factor=split_factor),), (0,))
