"""hwrng.verify over 8 real gloo ranks: passes on a correct run, names every fault."""

from __future__ import annotations

import dist_verify_checks as checks
import pytest
from helpers import pool_fixture

from hwrng.testing import DistributedPool

pool = pool_fixture(8, timeout=120)


def _same_everywhere(results: list[dict[str, object]]) -> dict[str, object]:
    for result in results:
        assert result["unchanged"], "verify changed an RNG state"
    first = results[0]
    assert all(r["failures"] == first["failures"] for r in results), "one report everywhere"
    return first


@pytest.mark.parametrize("sharded", [["tp"], ["dp", "tp"], []], ids=["tp", "dp,tp", "none"])
def test_a_correct_run_passes(pool: DistributedPool, sharded: list[str]) -> None:
    results = pool.run(checks.scenario, "none", sharded)
    result = _same_everywhere(results)
    assert result["ok"], result["text"]
    # The whole group (8 ranks): the setup reduction, where streams vary, and the verdict. Each
    # mesh dim: one reduction of its own ranks. The named state (seeded by rank) varies along
    # dp and tp: along each, an all_to_all of counts and one of records within that dim's
    # ranks -- never an exchange or a gather over the world.
    for r in results:
        assert r["collectives"] == {"c10d.allreduce_": 5, "c10d.alltoall_base_": 4}
        assert r["groups"] == [
            ("allreduce_", 8),
            ("allreduce_", 4),
            ("allreduce_", 2),
            ("allreduce_", 8),
            ("alltoall_base_", 4),
            ("alltoall_base_", 4),
            ("alltoall_base_", 2),
            ("alltoall_base_", 2),
            ("allreduce_", 8),
        ]
    assert result["streams"] == [
        "torch.cpu",
        "random",
        "numpy",
        "state:verify-check/model-parallel-rng",
        "dtensor",
    ]


def test_a_rank_that_reseeded_itself_is_named(pool: DistributedPool) -> None:
    result = _same_everywhere(pool.run(checks.scenario, "reseeded", ["tp"]))
    ranks, problems = result["failures"]["torch.cpu"]  # type: ignore[index]
    assert ranks == [5]
    assert "replicas disagree: rank 5 {'dp': 2, 'tp': 1} differ from rank 1" in problems[0]
    assert result["failures"]["dtensor"][0] == [5]  # type: ignore[index]
    assert "torch.cpu: replicas disagree: rank 5" in result["raised"]  # type: ignore[operator]


def test_a_rank_with_unseeded_numpy_is_named(pool: DistributedPool) -> None:
    result = _same_everywhere(pool.run(checks.scenario, "numpy unseeded", ["tp"]))
    assert set(result["failures"]) == {"numpy"}  # type: ignore[arg-type]
    assert result["failures"]["numpy"][0] == [2]  # type: ignore[index]


def test_a_replica_that_drew_one_number_more_is_named(pool: DistributedPool) -> None:
    result = _same_everywhere(pool.run(checks.scenario, "extra draw", ["tp"]))
    assert result["failures"]["torch.cpu"][0] == [6]  # type: ignore[index]


def test_a_named_state_with_one_seed_on_every_tp_rank_is_caught(pool: DistributedPool) -> None:
    result = _same_everywhere(pool.run(checks.scenario, "same named seed", ["tp"]))
    assert set(result["failures"]) == {"state:verify-check/model-parallel-rng"}  # type: ignore[arg-type]
    _, problems = result["failures"]["state:verify-check/model-parallel-rng"]  # type: ignore[index]
    assert problems[0].startswith("shards draw alike: rank 0 {'dp': 0, 'tp': 0}, rank 1")
    assert len(problems) == 4, "one line per dp row whose tp ranks share a seed"


def test_ranks_seeded_by_other_means_break_the_dtensor_stream(pool: DistributedPool) -> None:
    result = _same_everywhere(pool.run(checks.scenario, "other means", []))
    assert "dtensor" in result["failures"]  # type: ignore[operator]
    assert result["failures"]["dtensor"][0] == list(range(8))  # type: ignore[index]


def test_two_disagreeing_replicas_are_both_named(pool: DistributedPool) -> None:
    """With two replicas and no majority, verify cannot know which is wrong: it names both."""
    result = _same_everywhere(pool.run(checks.scenario, "numpy unseeded", ["dp"]))
    ranks, problems = result["failures"]["numpy"]  # type: ignore[index]
    assert ranks == [2, 3] and "no majority" in problems[0]
