"""hwrng.RNGState in a checkpoint that only rank 0 writes, as Lightning, Fabric and accelerate do.

Every rank calls ``state_dict()`` and writes its own entry into ``directory``; rank 0's
dict (the shared entry) goes through ``torch.save``; every rank ``torch.load``-s the file
and calls ``load_state_dict`` (or ``check`` now and the returned restore later, as the
Lightning callback does). One process here, then 2 gloo ranks: one verdict on every rank,
and a refusal changes nothing anywhere.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dist_rank0_checks as checks
import numpy as np
import pytest
import torch
from helpers import pool_fixture
from sealed import opened, sealed

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


def _job(saved: dict[str, Any]) -> dict[str, Any]:
    """The documented shared entry: format, world_size, nonce, plan, position."""
    job: dict[str, Any] = opened(saved["job"])
    return job


def _with_job(saved: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**saved, "job": sealed({**_job(saved), **changes})}


def _not_bytes(saved: dict[str, Any]) -> dict[str, Any]:
    return {**saved, "job": [saved["job"]]}


def _truncated(saved: dict[str, Any]) -> dict[str, Any]:
    return {**saved, "job": saved["job"][:50]}


def _other_layout(saved: dict[str, Any]) -> dict[str, Any]:
    return _with_job(saved, format=99)


def _two_ranks(saved: dict[str, Any]) -> dict[str, Any]:
    return _with_job(saved, world_size=2)


def _corrupt_rank_state(saved: dict[str, Any]) -> dict[str, Any]:
    return {**saved, "rank_0": b"not a state"}


def _no_entry(saved: dict[str, Any]) -> dict[str, Any]:
    return {}


def _old_layout(saved: dict[str, Any]) -> dict[str, Any]:
    return {"ranks": saved["rank_0"]}


def _no_own_entry(saved: dict[str, Any]) -> dict[str, Any]:
    return {"job": saved["job"]}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_not_bytes, "is list, not the bytes"),
        (_truncated, "hwrng entry is truncated"),
        (_other_layout, "has layout 99"),
        (_two_ranks, r"written by 2 rank\(s\) \(here 1\)"),
        (_corrupt_rank_state, "the RNG entry of rank 0 .* is not an RNG state sealed"),
        (_no_entry, "holds no hwrng entry"),
        (_old_layout, "layout 1"),
        (_no_own_entry, r"holds no RNG state for rank 0 \(no key 'rank_0'\)"),
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
    torch.rand(3)  # the saved DTensor position: 4
    state = hwrng.RNGState(on_mismatch="reseed")
    loaded = _written_by_rank_0(_two_ranks(state.state_dict()), tmp_path / "two.ckpt")
    hwrng.manual_seed(7, platform="cpu")
    hwrng.get_platform("cpu").set_seed_offset(torch.default_generator, 7, 4)
    continued = _fingerprint()[0][0]  # the oracle: torch continues on the plan's stream at 4
    hwrng.manual_seed(8, platform="cpu")
    _move_everything()
    with pytest.warns(hwrng.HwrngWarning, match=r"written by 2 rank\(s\) \(here 1\)"):
        state.load_state_dict(loaded)
    assert _fingerprint()[0][0] == continued
    plan = hwrng.current_seeding()
    assert plan is not None and (plan.seed, plan.generation) == (7, 1)


def test_on_mismatch_is_checked() -> None:
    with pytest.raises(hwrng.CheckpointError, match="'error' or 'reseed'"):
        hwrng.RNGState(on_mismatch="ignore")  # type: ignore[arg-type]


# -- 2 gloo ranks: rank 0 alone writes the file, every rank reads it -----------------------


pair = pool_fixture(2, timeout=180, name="pair")


def test_two_ranks_each_get_their_own_streams_back(
    pair: DistributedPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    results = pair.run(checks.round_trip, str(tmp_path_factory.mktemp("rank0")))
    assert [outcome for outcome, _, _, _ in results] == ["check changed nothing; restored"] * 2
    assert results[0][1] != results[1][1]  # tp sharded: each rank its own streams
    # rank 0's file holds only the shared entry; each rank's own is a file of its own, in the
    # set of this save, named by its nonce
    assert results[0][2] == ["job"]
    ((name, files),) = results[0][3].items()
    assert re.fullmatch("save-[0-9a-f]{16}", name) and files == ["rank-0.pt", "rank-1.pt"]


def test_without_a_directory_rank_1_finds_no_entry_and_every_rank_refuses(
    pair: DistributedPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outcomes = pair.run(checks.without_a_directory, str(tmp_path_factory.mktemp("nodir")))
    assert outcomes[1].startswith(
        "refused unchanged: refusing to restore the RNG state: the checkpoint holds no RNG "
        "state for rank 1 (no key 'rank_1')"
    ), outcomes
    assert outcomes[0].startswith("refused unchanged: rank 1 refused"), outcomes


@pytest.mark.parametrize("how", ["load_state_dict", "check"])
def test_when_one_rank_refuses_every_rank_refuses_unchanged(
    pair: DistributedPool, tmp_path_factory: pytest.TempPathFactory, how: str
) -> None:
    outcomes = pair.run(checks.one_rank_refuses, str(tmp_path_factory.mktemp("refuse")), how)
    assert outcomes[1].startswith("refused unchanged: live tracker(s) ['only-on-rank-1-"), outcomes
    assert outcomes[0].startswith("refused unchanged: rank 1 refused"), outcomes


def test_when_one_rank_cannot_write_its_entry_every_rank_refuses_the_save(
    pair: DistributedPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outcomes = pair.run(checks.one_rank_cannot_write, str(tmp_path_factory.mktemp("write")))
    assert all(o.startswith("rank 1 could not write its RNG entry:") for o in outcomes), outcomes


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_rank_file_is_refused_on_every_rank_naming_it_or_re_derived(
    pair: DistributedPool, tmp_path_factory: pytest.TempPathFactory, damage: str
) -> None:
    outcomes = pair.run(
        checks.damaged_rank_file, str(tmp_path_factory.mktemp(damage)), damage, "error"
    )
    why = "is truncated" if damage == "truncated" else "is corrupt: its checksum does not match"
    refusal = outcomes[1][0]
    assert refusal.startswith(
        "refused unchanged: refusing to restore the RNG state: the RNG entry of rank 1 (file "
    ), refusal
    assert "rank-1.pt'" in refusal and why in refusal and "on_mismatch='reseed'" in refusal
    assert outcomes[0][0].startswith("refused unchanged: rank 1 refused"), outcomes
    reseeded = pair.run(
        checks.damaged_rank_file, str(tmp_path_factory.mktemp(damage)), damage, "reseed"
    )
    for outcome, warned in reseeded:
        assert outcome == "WRONG STREAMS", outcome  # re-derived: new streams, not the saved
        assert len(warned) == 1 and "rank 1" in warned[0] and why in warned[0], warned


def test_a_commit_removes_every_file_of_a_dead_save_of_a_larger_world(
    pair: DistributedPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The issue's case: the cleanup stopped at the first missing rank file, keeping rank-3.pt
    of a killed 4-rank save through every commit on 2 ranks."""
    left = pair.run(checks.dead_set_of_a_larger_world, str(tmp_path_factory.mktemp("dead")))
    retired = [
        f"retired/{name}" for name in ("rank-0.pt", "rank-1.pt", "rank-3.pt", "rank-3.pt.tmp")
    ]
    assert left == [[retired, [], []]] * 2, left  # retired whole, then removed whole


def test_two_runs_on_one_path_with_a_commit_held_at_its_decision_keep_the_landed_file(
    pair: DistributedPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The requeue case on 2 ranks: run A decides (run B's set named by no file yet), B's
    ``last.ckpt`` lands and B commits, A goes on: ``last.ckpt`` resumes, also after A's next
    commit."""
    outcomes = pair.run(checks.two_runs_with_a_commit_held, str(tmp_path_factory.mktemp("held")))
    assert outcomes == [("restored", "restored")] * 2, outcomes
