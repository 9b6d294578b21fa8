"""Rules for OffsetTracker and RNGStatesTracker on one process."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.distributed.tensor import Replicate, Shard

import hwrng
from hwrng_conformance.helpers import all_distinct, draw


def test_offset_tracker_region_positions_the_generator(platform: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker(platform)
    generator = platform.generator()
    spec = hwrng.ShardSpec((10, 3), (2, 2), (Shard(0), Shard(1)), (1, 0))
    start, end = hwrng.shard_offsets(spec)
    platform.set_seed_offset(generator, 21, 400)
    with tracker.region(spec) as used:
        assert used is generator
        assert platform.get_seed_offset(generator) == (21, 400 + start)
        draw(generator, 15)
    assert platform.get_seed_offset(generator) == (21, 400 + end)


def test_offset_tracker_region_advances_on_exception(platform: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker(platform)
    generator = platform.generator()
    spec = hwrng.ShardSpec((7,), (3,), (Shard(0),), (2,))
    _, end = hwrng.shard_offsets(spec)
    platform.set_seed_offset(generator, 9, 0)
    with pytest.raises(KeyError), tracker.region(spec):
        raise KeyError("inside")
    assert platform.get_seed_offset(generator) == (9, end)


def test_offset_tracker_user_generator(platform: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker(platform)
    default_state = platform.get_rng_state()
    user = torch.Generator(device=platform.device())
    spec = hwrng.ShardSpec((16,), (4,), (Shard(0),), (3,))
    start, end = hwrng.shard_offsets(spec)
    platform.set_seed_offset(user, 5, 8)
    with tracker.region(spec, user) as used:
        assert used is user
        assert platform.get_seed_offset(user) == (5, 8 + start)
        draw(user, 4)
    assert platform.get_seed_offset(user) == (5, 8 + end)
    assert torch.equal(platform.get_rng_state(), default_state), (
        "the default generator is untouched"
    )


def test_offset_tracker_replicas_equal_shards_distinct(platform: hwrng.Platform) -> None:
    """Play every coordinate of a 2x3 mesh in turn on this one process."""
    tracker = hwrng.OffsetTracker(platform)
    generator = platform.generator()
    placements = (Replicate(), Shard(0))
    by_shard: dict[int, list[torch.Tensor]] = {}
    ends = set()
    for coordinate in itertools.product(range(2), range(3)):
        spec = hwrng.ShardSpec((9, 2), (2, 3), placements, coordinate)
        platform.set_seed_offset(generator, 77, 64)
        with tracker.region(spec):
            local = draw(generator, spec.local_shape[0] * spec.local_shape[1])
        by_shard.setdefault(coordinate[1], []).append(local)
        ends.add(platform.get_seed_offset(generator))
    for replicas in by_shard.values():
        assert all(torch.equal(replicas[0], r) for r in replicas)
    assert all_distinct([replicas[0] for replicas in by_shard.values()])
    assert len(ends) == 1, "every rank must end at the same position"


def test_rng_states_tracker_fork(platform: hwrng.Platform) -> None:
    tracker = hwrng.RNGStatesTracker(platform)
    tracker.add("model-parallel-rng", 2718)
    platform.manual_seed(1)
    default_state = platform.get_rng_state()
    with tracker.fork():
        first = draw(platform.generator())
    assert torch.equal(platform.get_rng_state(), default_state)
    with tracker.fork():
        second = draw(platform.generator())
    assert not torch.equal(first, second), "the named state must keep its advance"
    platform.manual_seed(2718)
    assert torch.equal(draw(platform.generator()), first)


def test_rng_states_tracker_restores_on_exception(platform: hwrng.Platform) -> None:
    tracker = hwrng.RNGStatesTracker(platform)
    tracker.add("a", 1)
    default_state = platform.get_rng_state()
    with pytest.raises(RuntimeError, match="inside"), tracker.fork("a"):
        draw(platform.generator())
        raise RuntimeError("inside")
    assert torch.equal(platform.get_rng_state(), default_state)


def test_rng_states_tracker_refusals(platform: hwrng.Platform) -> None:
    tracker = hwrng.RNGStatesTracker(platform)
    tracker.add("a", 1)
    with pytest.raises(ValueError, match="already tracked"):
        tracker.add("a", 2)
    with pytest.raises(ValueError, match="already used"):
        tracker.add("b", 1)
    with pytest.raises(KeyError, match="not tracked"), tracker.fork("missing"):
        pass  # pragma: no cover - never entered
    with pytest.raises(hwrng.InvalidStateError):
        tracker.set_states({"a": torch.zeros(3, dtype=torch.uint8)})
    assert tracker.names == ["a"]


@pytest.mark.hwrng_requires("graph_safe_states")
def test_named_states_swap_without_copies(platform: hwrng.Platform) -> None:
    """A graph-safe platform swaps named states in and out without copies.

    A fork's draws advance the very state object a CUDA graph registered, so
    captured forks replay with fresh numbers.
    """
    tracker = hwrng.RNGStatesTracker(platform)
    tracker.add("a", 17)
    (registered,) = tracker.graph_states()
    assert isinstance(registered, torch.Generator)
    before = platform.get_seed_offset(registered)
    default_state = platform.get_rng_state()
    with tracker.fork("a"):
        draw(platform.generator(), 64)
    assert platform.get_seed_offset(registered)[1] > before[1], "the registered state advanced"
    assert torch.equal(platform.get_rng_state(), default_state)
