"""CUDA graph registration of named states, by torch version (the gate, on the CPU).

torch 2.11-2.13 needs each graph-safe named state registered with a graph before
capture; torch >= 2.14 registers them per capture, and ``register_generator_state``
is a deprecated no-op that warns. The GPU half is backends/cuda/tests/test_cuda.py.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

import hwrng
from hwrng import _states
from hwrng.backends.cpu import CPUPlatform


class GraphSafeCPU(CPUPlatform):
    """Named states held as generators, as the cuda backend's graph-safe states are."""

    capabilities: ClassVar[frozenset[str]] = frozenset({"dtensor", "graph_safe_states"})

    def detached_state(self, generator: torch.Generator, seed: int) -> object:
        return torch.Generator().manual_seed(seed)


class RecordingGraph:
    """Stands in for torch.cuda.CUDAGraph's registration method (no GPU here)."""

    def __init__(self) -> None:
        self.registered: list[torch.Generator] = []

    def register_generator_state(self, state: torch.Generator) -> None:
        self.registered.append(state)


@pytest.fixture
def tracker() -> hwrng.RNGStatesTracker:
    states = hwrng.RNGStatesTracker(GraphSafeCPU())
    states.add("model-parallel-rng", 3)
    states.add("data-parallel-rng", 4)
    return states


@pytest.mark.parametrize("version", ["2.11.0", "2.12.1", "2.13.0+cpu"])
def test_before_2_14_each_state_is_registered(
    tracker: hwrng.RNGStatesTracker, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch, "__version__", version)
    graph = RecordingGraph()
    registered = tracker.register_graph_states(graph)
    assert len(registered) == 2
    assert graph.registered == registered == tracker.graph_states()


@pytest.mark.parametrize("version", ["2.14.0a0+git1234", "2.14.1", "2.15.0+cu132", "3.0.0"])
def test_from_2_14_the_deprecated_call_is_never_made(
    tracker: hwrng.RNGStatesTracker, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch, "__version__", version)
    graph = RecordingGraph()
    assert tracker.register_graph_states(graph) == []
    assert graph.registered == []
    assert len(tracker.graph_states()) == 2, "the states are still there to inspect"


def test_a_graph_without_registration_is_refused_before_any_is_made(
    tracker: hwrng.RNGStatesTracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch, "__version__", "2.13.0")
    with pytest.raises(hwrng.TrackerError, match=r"expected a torch\.cuda\.CUDAGraph"):
        tracker.register_graph_states(object())


def test_tensor_states_need_no_registration_on_any_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "__version__", "2.11.0")
    states = hwrng.RNGStatesTracker(CPUPlatform())
    states.add("model-parallel-rng", 3)
    assert states.graph_states() == []
    assert states.register_graph_states(object()) == []


def test_this_torchs_gate() -> None:
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    assert _states.graph_states_registered_per_capture() is ((major, minor) >= (2, 14))
