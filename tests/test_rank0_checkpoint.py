"""hwrng.RNGState in a checkpoint that only rank 0 writes, as Lightning, Fabric and accelerate do.

Every rank calls ``state_dict()``; rank 0's dict goes through ``torch.save``; every
rank ``torch.load``-s the file and calls ``load_state_dict`` (or ``check`` now and the
returned restore later, as the Lightning callback does). One process here, then 2
gloo ranks: one verdict on every rank, and a refusal changes nothing anywhere.
"""

from __future__ import annotations

import io
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dist_rank0_checks as checks
import numpy as np
import pytest
import torch
from helpers import pool_fixture

import hwrng
from hwrng.testing import DistributedPool


def _fingerprint() -> tuple[Any, ...]:
    """Every stream's next draws and the plan, read without moving anything."""
    with hwrng.isolate_rng(platform="cpu"):
        draws = (torch.rand(4).tolist(), random.random(), float(np.random.rand()))
    plan = hwrng.current_seeding()
    return (
        draws,
        os.environ.get("PYTHONHASHSEED"),
        None if plan is None else plan.to_dict(),
        hwrng.get_platform("cpu").counter.peek(torch.default_generator),
    )


def _move_everything() -> None:
    torch.rand(5), random.random(), np.random.rand()


def _written_by_rank_0(saved: dict[str, Any], path: Path) -> dict[str, Any]:
    """What a trainer hands back on load: rank 0's dict through torch.save and torch.load."""
    torch.save(saved, path)
    loaded: dict[str, Any] = torch.load(path, weights_only=True)
    return loaded


def _entry(saved: dict[str, Any]) -> dict[str, Any]:
    """The documented layout inside the one key: format, world_size, nonces, ranks."""
    entry: dict[str, Any] = torch.load(io.BytesIO(saved["ranks"]), weights_only=True)
    return entry


def _packed(entry: dict[str, Any]) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(entry, buffer)
    return {"ranks": buffer.getvalue()}


def test_rank_0s_dict_through_torch_save_restores_every_stream(tmp_path: Path) -> None:
    hwrng.manual_seed(7, platform="cpu")
    _move_everything()
    state = hwrng.RNGState()
    saved = state.state_dict()
    expected = _fingerprint()
    loaded = _written_by_rank_0(saved, tmp_path / "rank0.ckpt")
    _move_everything()
    state.load_state_dict(loaded)  # the object that saved it, as in the uninterrupted run
    assert _fingerprint() == expected
    _move_everything()
    hwrng.RNGState().load_state_dict(loaded)  # a fresh one, as in fresh processes
    assert _fingerprint() == expected


def test_check_changes_nothing_and_its_restore_carries_out_the_verdict(tmp_path: Path) -> None:
    hwrng.manual_seed(7, platform="cpu")
    state = hwrng.RNGState()
    loaded = _written_by_rank_0(state.state_dict(), tmp_path / "rank0.ckpt")
    expected = _fingerprint()
    _move_everything()
    moved = _fingerprint()
    restore = hwrng.RNGState().check(loaded)
    assert _fingerprint() == moved
    restore()
    assert _fingerprint() == expected


def _not_bytes(saved: dict[str, Any]) -> dict[str, Any]:
    return {"ranks": [saved["ranks"]]}


def _truncated(saved: dict[str, Any]) -> dict[str, Any]:
    return {"ranks": saved["ranks"][:50]}


def _other_layout(saved: dict[str, Any]) -> dict[str, Any]:
    return _packed({**_entry(saved), "format": 99})


def _two_ranks(saved: dict[str, Any]) -> dict[str, Any]:
    entry = _entry(saved)
    return _packed(
        {**entry, "world_size": 2, "ranks": entry["ranks"] * 2, "nonces": entry["nonces"] * 2}
    )


def _corrupt_rank_state(saved: dict[str, Any]) -> dict[str, Any]:
    return _packed({**_entry(saved), "ranks": [b"not a state"]})


def _no_entry(saved: dict[str, Any]) -> dict[str, Any]:
    return {}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_not_bytes, "is list, not the bytes"),
        (_truncated, "truncated or corrupt"),
        (_other_layout, "has layout 99"),
        (_two_ranks, r"written by 2 rank\(s\) \(here 1\)"),
        (_corrupt_rank_state, "the RNG state of rank 0 is not a readable"),
        (_no_entry, "did not fill"),
    ],
)
@pytest.mark.parametrize("how", ["load_state_dict", "check"])
def test_a_bad_entry_is_refused_and_nothing_changes(
    tmp_path: Path,
    mutate: Callable[[dict[str, Any]], dict[str, Any]],
    message: str,
    how: str,
) -> None:
    hwrng.manual_seed(7, platform="cpu")
    state = hwrng.RNGState()
    bad = _written_by_rank_0(mutate(state.state_dict()), tmp_path / "bad.ckpt")
    _move_everything()
    before = _fingerprint()
    with pytest.raises(hwrng.CheckpointError, match=message):
        getattr(hwrng.RNGState(), how)(bad)
    assert _fingerprint() == before


def test_with_reseed_a_larger_checkpoint_is_re_derived_from_its_plan(tmp_path: Path) -> None:
    hwrng.manual_seed(7, platform="cpu")
    state = hwrng.RNGState(on_mismatch="reseed")
    loaded = _written_by_rank_0(_two_ranks(state.state_dict()), tmp_path / "two.ckpt")
    hwrng.manual_seed(7, platform="cpu")
    from_the_plan = _fingerprint()[0]  # the oracle: the plan's streams from their start
    hwrng.manual_seed(8, platform="cpu")
    _move_everything()
    with pytest.warns(hwrng.HwrngWarning, match=r"written by 2 rank\(s\) \(here 1\)"):
        state.load_state_dict(loaded)
    assert _fingerprint()[0] == from_the_plan


def test_on_mismatch_is_checked() -> None:
    with pytest.raises(hwrng.CheckpointError, match="'error' or 'reseed'"):
        hwrng.RNGState(on_mismatch="ignore")  # type: ignore[arg-type]


# -- 2 gloo ranks: rank 0 alone writes the file, every rank reads it -----------------------


pair = pool_fixture(2, timeout=180, name="pair")


def test_two_ranks_each_get_their_own_streams_back(
    pair: DistributedPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    results = pair.run(checks.round_trip, str(tmp_path_factory.mktemp("rank0")))
    assert [outcome for outcome, _ in results] == ["check changed nothing; restored"] * 2
    assert results[0][1] != results[1][1]  # tp sharded: each rank its own streams


@pytest.mark.parametrize("how", ["load_state_dict", "check"])
def test_when_one_rank_refuses_every_rank_refuses_unchanged(
    pair: DistributedPool, tmp_path_factory: pytest.TempPathFactory, how: str
) -> None:
    outcomes = pair.run(checks.one_rank_refuses, str(tmp_path_factory.mktemp("refuse")), how)
    assert outcomes[1].startswith("refused unchanged: live tracker(s) ['only-on-rank-1-"), outcomes
    assert outcomes[0].startswith("refused unchanged: rank 1 refused"), outcomes
