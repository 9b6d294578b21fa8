"""Exact resume over real gloo processes: train, checkpoint, train on; then fresh processes
load and train on; the losses match bit for bit, through DCP and through torch.save."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import dist_resume_checks as checks
import pytest
from helpers import pool_fixture

from hwrng.testing import DistributedPool

EPOCHS_BEFORE, EPOCHS_AFTER = 1, 2


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[float]]]:
    directory = tmp_path_factory.mktemp("resume")
    with DistributedPool(4, timeout=180) as pool:
        losses = pool.run(checks.train_and_checkpoint, str(directory), EPOCHS_BEFORE, EPOCHS_AFTER)
    return directory, losses


fresh = pool_fixture(4, timeout=180, name="fresh")


def test_the_uninterrupted_run_is_random_where_it_should_be(
    trained: tuple[Path, list[list[float]]],
) -> None:
    _, losses = trained
    steps = EPOCHS_AFTER * checks.STEPS_PER_EPOCH
    assert len(losses) == 4 and all(len(per_rank) == steps for per_rank in losses)
    assert len({tuple(per_rank) for per_rank in losses}) == 4, "every rank its own data, dropout"


@pytest.mark.parametrize("mode", ["dcp", "torch"])
def test_fresh_processes_resume_bit_for_bit(
    trained: tuple[Path, list[list[float]]], fresh: DistributedPool, mode: str
) -> None:
    directory, expected = trained
    resumed = fresh.run(checks.resume, str(directory), mode, EPOCHS_AFTER)
    assert resumed == expected


def test_a_checkpoint_of_rank_1_is_refused_on_rank_2(
    trained: tuple[Path, list[list[float]]], fresh: DistributedPool
) -> None:
    directory, _ = trained
    messages = fresh.run(checks.load_another_ranks_file, str(directory))
    # hwrng.load is a collective: every rank refuses in the same words, none changes
    assert all(m == messages[0] for m in messages), messages
    assert messages[0].startswith("unchanged: rank 2 refused to load its RNG state, so no rank")
    assert "rank 1 (here 2)" in messages[0] and "on_mismatch='reseed'" in messages[0]


# -- the DCP entry: any loading process, every planner option, one verdict, other worlds --------


pair = pool_fixture(2, timeout=180, name="pair")


@pytest.mark.parametrize("how", ["manual_seed", "torch.manual_seed", "nothing"])
def test_dcp_resume_whatever_the_loading_process_did(
    fresh: DistributedPool, tmp_path_factory: pytest.TempPathFactory, how: str
) -> None:
    directory = tmp_path_factory.mktemp("other-seeding")
    results = fresh.run(checks.resume_after_other_seeding, str(directory), how)
    assert [outcome for outcome, _ in results] == ["restored"] * 4
    draws = [tuple(map(str, d)) for _, d in results]  # mesh (dp=2, tp=2), tp sharded
    assert draws[0] == draws[2] and draws[1] == draws[3] and draws[0] != draws[1]


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("default", "restored"),
        ("dedup_save_to_lowest_rank", "restored"),
        ("allow_partial_load", "restored"),
        ("async_save", "restored"),
        ("async_save, process", "restored"),
        ("async_save, async staging", "restored"),
        ("flatten_state_dict=False", "refused unchanged: DCP did not fill"),
        ("no entry, allow_partial_load", "refused unchanged: DCP did not fill"),
        ("RNGLoadPlanner", "restored"),
        ("RNGSavePlanner, dedup_save_to_lowest_rank", "restored"),
        (
            "layout 1, RNGLoadPlanner",
            "refused unchanged: the checkpoint holds hwrng's RNG entry in layout 1",
        ),
    ],
)
def test_every_planner_option_works_exactly_or_is_refused_on_every_rank(
    fresh: DistributedPool, tmp_path_factory: pytest.TempPathFactory, option: str, expected: str
) -> None:
    directory = tmp_path_factory.mktemp("options")
    outcomes = fresh.run(checks.planner_option, str(directory), option)
    assert all(outcome.startswith(expected) for outcome in outcomes), outcomes


def test_the_planner_leaves_out_only_hwrngs_missing_keys(
    fresh: DistributedPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outcomes = fresh.run(
        checks.a_missing_model_key_under_the_planner, str(tmp_path_factory.mktemp("m"))
    )
    assert outcomes == ["CheckpointException: True"] * 4, outcomes


def test_when_one_rank_refuses_no_rank_restores(
    fresh: DistributedPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outcomes = fresh.run(checks.one_rank_refuses, str(tmp_path_factory.mktemp("one")))
    assert outcomes[2].startswith("refused unchanged: live tracker(s) ['only-on-rank-2']")
    for rank in (0, 1, 3):
        assert outcomes[rank].startswith("refused unchanged: rank 2 refused"), outcomes[rank]


@pytest.mark.parametrize("direction", ["4 -> 2", "2 -> 4"])
def test_another_world_size_is_refused_everywhere_or_reseeded_everywhere(
    fresh: DistributedPool,
    pair: DistributedPool,
    tmp_path_factory: pytest.TempPathFactory,
    direction: str,
) -> None:
    directory = str(tmp_path_factory.mktemp("worlds"))
    saver, loader = (fresh, pair) if direction == "4 -> 2" else (pair, fresh)
    positions = saver.run(checks.save_on_this_world, directory, "world")
    assert len({offset for _, offset in positions}) == 1  # seeds differ along tp
    (_, position), saved_world = positions[0], len(positions)
    refused = loader.run(checks.load_on_another_world, directory, "world", "error", 0)
    message = f"written by {saved_world} rank(s) (here {len(refused)})"
    assert all(r.startswith("refused unchanged") and message in r for r in refused), refused
    reseeded = loader.run(checks.load_on_another_world, directory, "world", "reseed", position)
    assert [ok for ok, _, _ in reseeded] == [True] * len(reseeded)
    assert all(len(warned) == 1 and message in warned[0] for _, _, warned in reseeded)
    draws = [tuple(map(str, d)) for _, d, _ in reseeded]  # tp sharded, dp replicated
    assert draws[0] != draws[1] and draws[-2:] == draws[:2]
    if direction == "2 -> 4":  # the default planner stops at the new ranks' missing keys
        stopped = loader.run(checks.grown_without_the_planner, directory, "world")
        assert stopped == ["CheckpointException: True"] * 4, stopped


@pytest.mark.parametrize("direction", ["4 -> 2", "2 -> 4"])
def test_elastic_invariant_resume_continues_the_dtensor_stream_bit_for_bit(
    fresh: DistributedPool,
    pair: DistributedPool,
    tmp_path_factory: pytest.TempPathFactory,
    direction: str,
) -> None:
    directory = str(tmp_path_factory.mktemp("elastic"))
    saver, loader = (fresh, pair) if direction == "4 -> 2" else (pair, fresh)
    references = saver.run(checks.elastic_reference, directory, "elastic")
    before, after = references[0]
    assert all(r == (before, after) for r in references)  # full tensors: the same everywhere
    assert before != after  # the saved position matters
    resumed = loader.run(checks.elastic_resume, directory, "elastic")
    for ops, warned in resumed:
        assert ops == after  # bit for bit: tolist() of float32 is exact
        assert len(warned) == 1 and "saved DTensor position" in warned[0]


def test_a_save_inside_a_fork_on_one_rank_is_refused_on_every_rank(
    fresh: DistributedPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    messages = fresh.run(checks.save_with_one_rank_in_a_fork, str(tmp_path_factory.mktemp("f")))
    assert all(m.startswith("rank 1 cannot take its RNG state") for m in messages), messages
    assert all("inside fork_rng" in m for m in messages)


# -- hwrng.save / hwrng.load per rank: one save across ranks ----------------------------------


def test_per_rank_files_of_different_saves_are_refused_on_every_rank(
    pair: DistributedPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The issue's case: rank 1 killed before its save of step 3 over its file; the resume
    mixed rank 0 at step 3 with rank 1 at step 2, silently."""
    outcomes = pair.run(
        checks.per_rank_files_of_two_saves, str(tmp_path_factory.mktemp("mixed")), "error"
    )
    for outcome, warned in outcomes:
        assert outcome.startswith(
            "refused unchanged: refusing to load the RNG state: the ranks' RNG files come from "
            "different saves: ranks [0, 1]"
        ), outcome
        assert "rng-0.pt" in outcome and "rng-1.pt" in outcome, outcome
        assert "on_mismatch='reseed'" in outcome and not warned
    reseeded = pair.run(
        checks.per_rank_files_of_two_saves, str(tmp_path_factory.mktemp("mixed")), "reseed"
    )
    for outcome, warned in reseeded:
        assert outcome == "WRONG STREAMS", outcome  # re-derived: new streams, not a mix
        assert len(warned) == 1 and "different saves" in warned[0], warned


def test_when_one_rank_cannot_save_its_file_every_rank_raises(
    pair: DistributedPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outcomes = pair.run(
        checks.per_rank_files_one_rank_cannot_write, str(tmp_path_factory.mktemp("write"))
    )
    assert outcomes[1].startswith("cannot save the RNG state to"), outcomes
    assert outcomes[0].startswith("rank 1 could not write its RNG state, so no rank did"), outcomes


@pytest.mark.parametrize("action", ["save", "load"])
def test_one_ranks_unknown_platform_fails_every_rank_at_once(
    fresh: DistributedPool, tmp_path_factory: pytest.TempPathFactory, action: str
) -> None:
    """Rank 1 alone names no backend: it still meets its peers, so every rank refuses at once
    (before, rank 1 raised alone and its peers waited in the collective for the pool's timeout)."""
    results = fresh.run(
        checks.per_rank_one_rank_names_no_backend, str(tmp_path_factory.mktemp(action)), action
    )
    assert all(r["raised"] is not None for r in results), results
    assert all(r["unchanged"] for r in results), results
    assert all(r["seconds"] < 60 for r in results), results  # the pool's timeout is 180 s
    peers = [r for rank, r in enumerate(results) if rank != 1 or action == "load"]
    assert all(r["raised"] == "CheckpointError" for r in peers), results
    assert all(r["message"] == peers[0]["message"] for r in peers), results
    assert peers[0]["message"].startswith("rank 1 "), results
    assert "no-such-backend" in peers[0]["message"], results
    if action == "save":  # the rank whose argument is wrong raises its own error
        assert results[1]["raised"] == "BackendNotFoundError", results


# -- hwrng.load with on_mismatch="reseed": one plan for every rank, or the same refusal ---------


def _coordinates(rank: int) -> tuple[int, int]:
    """The oracle's (dp, tp) coordinate of ``rank``: init_device_mesh lays ranks out row-major."""
    return rank // 2, rank % 2


def _drawn_as_the_plan_says(results: list[dict[str, Any]]) -> None:
    """Sharded along dp only: two ranks draw alike, stream by stream, iff their dp is the same."""
    for stream in ("torch", "random", "numpy"):
        for a, b in itertools.combinations(range(len(results)), 2):
            replicas = _coordinates(a)[0] == _coordinates(b)[0]
            alike = results[a]["draws"][stream] == results[b]["draws"][stream]
            assert alike == replicas, (stream, a, b, results[a]["draws"], results[b]["draws"])


def _files(run: str, world: int, **others: str) -> dict[int, str]:
    """Each rank's file of ``run``; ``others`` (``rank_1="b"``) puts a rank on another run's."""
    files = {rank: f"{run}/rng-{rank}.pt" for rank in range(world)}
    for key, other in others.items():
        rank = int(key.removeprefix("rank_"))
        files[rank] = f"{other}/rng-{rank}.pt"
    return files


@pytest.mark.parametrize(
    ("case", "saved_on", "loaded_on", "files", "damaged"),
    [
        ("2 -> 4: ranks 2 and 3 have no file", 2, 4, _files("a", 4), None),
        ("4 -> 2", 4, 2, _files("a", 2), None),
        ("rank 1 holds another run's file", 4, 4, _files("a", 4, rank_1="b"), None),
        ("rank 0 holds another run's file", 4, 4, _files("a", 4, rank_0="b"), None),
        ("ranks 2 and 3 hold another run's", 4, 4, _files("a", 4, rank_2="b", rank_3="b"), None),
        ("rank 3's file is missing", 4, 4, _files("a", 4), ("a/rng-3.pt", "removed")),
        ("rank 2's file is torn", 4, 4, _files("a", 4), ("a/rng-2.pt", "cut in half")),
    ],
)
def test_reseed_of_per_rank_files_derives_every_rank_from_one_plan(
    fresh: DistributedPool,
    pair: DistributedPool,
    tmp_path_factory: pytest.TempPathFactory,
    case: str,
    saved_on: int,
    loaded_on: int,
    files: dict[int, str],
    damaged: tuple[str, str] | None,
) -> None:
    """The issue's cases: a 2-rank save loaded on 4 ranks was refused ("rank 2 ... no such
    file"); a rank holding another run's file re-derived from that run's plan, so tensor-parallel
    replicas drew differently. Every rank now re-derives from the plan most files hold, or the
    lowest rank's on a tie (run a, seed 53): replicas draw alike and shards apart, by verify and
    by the oracle of draws."""
    directory = tmp_path_factory.mktemp("reseed")
    pools = {2: pair, 4: fresh}
    pools[saved_on].run(checks.save_a_run, str(directory), "a", 53)
    if any("b/" in f for f in files.values()):
        pools[saved_on].run(checks.save_a_run, str(directory), "b", 777)
    if damaged is not None:
        file, how = directory / damaged[0], damaged[1]
        if how == "removed":
            file.unlink()
        else:
            file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    results = pools[loaded_on].run(checks.reseed_per_rank, str(directory), files, case)
    assert all("refused" not in r for r in results), results
    _drawn_as_the_plan_says(results)
    assert all(r["verified"] for r in results), results[0]["report"]
    assert [r["plan"] for r in results] == [(53, ["dp"], 1)] * loaded_on
    warned = [r["warned"] for r in results]
    assert all(len(w) == 1 for w in warned), warned
    assert all(w == warned[0] for w in warned), warned  # one verdict, in the same words
    tie = case.startswith("ranks 2 and 3 hold")  # no plan held by more than half: the lowest rank's
    chose = "the lowest rank's of the 4 found" if tie else "the seed plan that"
    assert chose in warned[0][0], warned[0]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("no mesh", "pass the new one: on_mismatch='reseed', mesh=new_mesh"),
        ("rank 2 in a fork", "rank 2: cannot re-derive the streams"),
        ("each rank its own seed", "the files of one save hold different seed plans"),
        ("no file anywhere", "no rank found a file of hwrng.save"),
        ("rank 1 says error", "the ranks passed different on_mismatch"),
    ],
)
def test_a_reseed_that_cannot_be_done_is_refused_on_every_rank_in_the_same_words(
    fresh: DistributedPool,
    pair: DistributedPool,
    tmp_path_factory: pytest.TempPathFactory,
    case: str,
    expected: str,
) -> None:
    """Where no one plan can re-derive every rank, every rank raises the same error and keeps its
    streams (on main each rank said something else, or ranks re-derived from different plans)."""
    directory = tmp_path_factory.mktemp("refused")
    files = _files("a", 4)
    if case == "each rank its own seed":  # 4 ranks, each seeded alone; rank 3's file lost
        fresh.run(checks.save_a_run, str(directory), "a", 100, one_plan=False)
        (directory / "a" / "rng-3.pt").unlink()
    elif case == "rank 1 says error":  # rank 1 holds another run's file (main: it alone refused)
        fresh.run(checks.save_a_run, str(directory), "a", 53)
        fresh.run(checks.save_a_run, str(directory), "b", 777)
        files = _files("a", 4, rank_1="b")
    elif case != "no file anywhere":  # saved by 2 ranks, loaded by 4
        pair.run(checks.save_a_run, str(directory), "a", 53)
    results = fresh.run(checks.reseed_per_rank, str(directory), files, case)
    messages = [r.get("refused") for r in results]
    assert all(m == messages[0] for m in messages), messages
    assert messages[0] is not None and expected in messages[0], messages[0]
    assert all(r["unchanged"] for r in results)
