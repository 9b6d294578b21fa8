"""RNGStatesTracker on the CPU backend, beyond the conformance rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hwrng
from hwrng import TrackerError, UnknownStateError


def test_add_fork_and_copies(cpu: hwrng.Platform) -> None:
    tracker = hwrng.RNGStatesTracker("cpu")
    tracker.add("model-parallel-rng", 10)
    tracker.add("expert-parallel-rng", 11)
    assert tracker.names == ["model-parallel-rng", "expert-parallel-rng"]
    assert tracker.seeds == {"model-parallel-rng": 10, "expert-parallel-rng": 11}
    states = tracker.get_states()
    states["model-parallel-rng"].zero_()  # a copy: the tracker is unaffected
    with tracker.fork():
        a = torch.rand(3)
    torch.manual_seed(10)
    assert torch.equal(torch.rand(3), a)


def test_set_states_round_trip_and_checks(cpu: hwrng.Platform) -> None:
    tracker = hwrng.RNGStatesTracker(cpu)
    tracker.add("a", 1)
    saved = tracker.get_states()
    with tracker.fork("a"):
        first = torch.rand(4)
    tracker.set_states(saved)  # as after loading a checkpoint
    with tracker.fork("a"):
        assert torch.equal(torch.rand(4), first)
    good = tracker.get_states()["a"]
    for bad in ({"a": good[:-1]}, {"a": good.float()}, {"": good}, {3: good}, [("a", good)]):
        with pytest.raises((hwrng.InvalidStateError, TrackerError)):
            tracker.set_states(bad)  # type: ignore[arg-type]
    assert torch.equal(tracker.get_states()["a"], good), "a refused set_states changes nothing"
    with pytest.raises(TrackerError, match=r"leaves out \['a'\] and adds \['b'\]"):
        tracker.set_states({"b": good})  # would silently drop "a"
    tracker.reset()
    tracker.set_states({"b": good})
    assert tracker.seeds == {"b": 1}, "a restored state keeps its seed"


def test_refusals(cpu: hwrng.Platform) -> None:
    tracker = hwrng.RNGStatesTracker(cpu)
    for name in ("", None, 3):
        with pytest.raises(TrackerError, match="non-empty string"):
            tracker.add(name, 1)  # type: ignore[arg-type]
    with pytest.raises(hwrng.InvalidSeedError):
        tracker.add("a", -1)
    assert tracker.names == []
    with (
        pytest.raises(
            UnknownStateError, match="'model-parallel-rng' is not tracked \\(tracked: none\\)"
        ),
        tracker.fork(),
    ):
        pass  # pragma: no cover - never entered
    tracker.add("a", 1)
    with tracker.fork("a"):
        with pytest.raises(RuntimeError, match="already forked"), tracker.fork("a"):
            pass  # pragma: no cover - never entered
        with pytest.raises(TrackerError, match="forked"):
            tracker.reset()
        with pytest.raises(TrackerError, match="forked"):
            tracker.set_states({})
    tracker.reset()
    assert tracker.names == [] and tracker.seeds == {}
    tracker.add("a", 1)  # a reset frees names and seeds


def test_add_leaves_the_current_state(cpu: hwrng.Platform) -> None:
    torch.manual_seed(5)
    state = torch.get_rng_state()
    hwrng.RNGStatesTracker(cpu).add("x", 99)
    assert torch.equal(torch.get_rng_state(), state)


def test_set_states_refuses_invalid_contents(cpu: hwrng.Platform) -> None:

    tracker = hwrng.RNGStatesTracker(cpu)
    tracker.add("a", 1)
    good = tracker.get_states()["a"]
    corrupt = good.clone()
    corrupt.numpy()[8:12].view(np.int32)[0] = 0
    with pytest.raises(hwrng.InvalidStateError, match="not a valid state"):
        tracker.set_states({"a": corrupt})
    assert torch.equal(tracker.get_states()["a"], good)
    assert tracker.forked == frozenset()


def test_restored_states_keep_their_seeds(cpu: hwrng.Platform) -> None:
    first = hwrng.RNGStatesTracker(cpu)
    first.add("a", 1)
    second = hwrng.RNGStatesTracker(cpu)
    second.set_states(first.get_states())
    assert second.seeds == {"a": 1}
    with pytest.raises(hwrng.TrackerError, match="seed 1 is already used by RNG state 'a'"):
        second.add("b", 1)
    with pytest.raises(hwrng.TrackerError, match="seed 1"):
        hwrng.RNGStatesTracker(cpu).set_states(
            {"a": first.get_states()["a"], "b": first.get_states()["a"]}
        )


def test_nesting_errors_are_hwrng_errors(cpu: hwrng.Platform) -> None:
    tracker = hwrng.RNGStatesTracker(cpu)
    tracker.add("a", 1)
    with tracker.fork("a"), pytest.raises(hwrng.NestingError), tracker.fork("a"):
        pass  # pragma: no cover - never entered
