"""AllRanksRNGState in one process: round trip, and loud refusals before anything changes."""

from __future__ import annotations

import random

import pytest
import torch

import hwrng
from hwrng.integrations import AllRanksRNGState


def test_a_round_trip_restores_every_stream() -> None:
    hwrng.manual_seed(7)
    state = AllRanksRNGState()
    saved = state.state_dict()
    expected = (torch.rand(3), random.random())
    torch.rand(5)
    state.load_state_dict(saved)
    assert torch.equal(torch.rand(3), expected[0])
    assert random.random() == expected[1]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda sd: {**sd, "format": "other"}, "not an hwrng all-ranks RNG state"),
        (lambda sd: {**sd, "ranks": []}, "no per-rank entries"),
        (lambda sd: {**sd, "ranks": [sd["ranks"][0]] * 2}, r"written by 2 ranks \(here 1\)"),
        (lambda sd: {**sd, "ranks": [sd["ranks"][0][:50]]}, "truncated or corrupt"),
    ],
)
def test_a_bad_state_is_refused_and_nothing_changes(mutate, message) -> None:  # type: ignore[no-untyped-def]
    hwrng.manual_seed(7)
    state = AllRanksRNGState()
    bad = mutate(state.state_dict())
    before = torch.get_rng_state()
    with pytest.raises(hwrng.CheckpointError, match=message):
        state.load_state_dict(bad)
    assert torch.equal(torch.get_rng_state(), before)


def test_with_reseed_a_rank_reads_its_own_entry_of_a_larger_checkpoint() -> None:
    hwrng.manual_seed(7)
    state = AllRanksRNGState(on_mismatch="reseed")
    saved = state.state_dict()
    expected = torch.rand(3)
    state.load_state_dict({**saved, "ranks": saved["ranks"] * 2})
    assert torch.equal(torch.rand(3), expected)


def test_on_mismatch_is_checked() -> None:
    with pytest.raises(hwrng.CheckpointError, match="on_mismatch"):
        AllRanksRNGState(on_mismatch="ignore")  # type: ignore[arg-type]
