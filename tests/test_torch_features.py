"""Private parts of torch hwrng hooks outside the DTensor adapter: judged by what torch has.

The DTensor adapter's own checks are in test_dtensor_adapter.py; the CUDA-graph gate is in
test_graph_states.py. A torch that lacks a part is stood in for by taking the part away from
the installed one (as the adapter's tests do), and is refused before anything changes.
"""

from __future__ import annotations

import pytest
import torch
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

import hwrng
from hwrng.checkpoint._planners import merge_step_problem


def test_this_torchs_save_planner_has_the_step_rng_save_planner_replaces() -> None:
    assert merge_step_problem(DefaultSavePlanner) is None
    hwrng.RNGSavePlanner(dedup_save_to_lowest_rank=True)


def test_a_save_planner_without_the_step_is_named() -> None:
    class Bare:
        pass

    class Moved:
        def _create_global_plan(self, plans: object, caching: bool) -> None: ...

    assert merge_step_problem(Bare) == "Bare has no _create_global_plan"
    assert merge_step_problem(Moved) == (
        "Moved._create_global_plan takes ['self', 'plans', 'caching'], not (self, all_plans)"
    )


def test_rng_save_planner_is_refused_on_a_torch_without_the_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(DefaultSavePlanner, "_create_global_plan")
    monkeypatch.setattr(torch, "__version__", "2.10.0")  # the message names what was found
    with pytest.raises(
        hwrng.CheckpointError,
        match=r"torch 2\.10 to 2\.15 have and torch 2\.10\.0 lacks \(DefaultSavePlanner has no",
    ):
        hwrng.RNGSavePlanner()
