"""manual_seed over real processes: an 8-rank dp=2,pp=2,tp=2 mesh on gloo, and groups."""

from __future__ import annotations

import itertools
from typing import Any

import dist_seeding_checks as checks
import pytest
from helpers import pool_fixture

from hwrng.testing import DistributedPool

DRAWS = ("torch", "device", "random", "numpy")


pool = pool_fixture(8, timeout=120)


@pytest.mark.parametrize(
    ("sharded", "seeds"),
    [
        (["pp", "tp"], [123, 124, 125, 126, 123, 124, 125, 126]),
        (["tp", "pp"], [123, 125, 124, 126, 123, 125, 124, 126]),
        (["dp"], [123, 123, 123, 123, 124, 124, 124, 124]),
    ],
)
def test_mesh_seeding_matches_the_rfc_and_the_draws_follow(
    pool: DistributedPool, sharded: list[str], seeds: list[int]
) -> None:
    gathered = pool.run(checks.seed_on_mesh, 123, sharded)
    assert all(g == gathered[0] for g in gathered), "all ranks gathered the same view"
    view = gathered[0]
    assert [r["rank"] for r in view] == list(range(8))
    assert [r["seed"] for r in view] == seeds
    for a, b in itertools.combinations(view, 2):
        same_shard = all(a["coordinate"][d] == b["coordinate"][d] for d in sharded)
        for key in DRAWS:
            assert (a[key] == b[key]) == same_shard, (key, a["rank"], b["rank"])


def test_groups_seed_like_the_mesh(pool: DistributedPool) -> None:
    results = pool.run(checks.seed_on_groups, 77, ["pp", "tp"])
    assert [r["groups"] for r in results] == [77, 78, 79, 80, 77, 78, 79, 80]
    for r in results:
        assert r["groups"] == r["mesh"]
        assert r["draws"] == r["again"], "groups and mesh seed every RNG identically"


def test_hand_made_groups(pool: DistributedPool) -> None:
    assert pool.run(checks.seed_on_hand_made_groups, 10) == [10, 11] * 4


def test_seeding_needs_no_collective(pool: DistributedPool) -> None:
    assert pool.run(checks.only_rank_zero_seeds, 5) == [5, None, None, None, None, None, None, None]


def test_bad_mesh_arguments_are_refused_before_any_rng_changes(pool: DistributedPool) -> None:
    results = pool.run(checks.mesh_refusals, 3)
    assert all(r == results[0] for r in results)
    unknown, twice, twice_tuple, unordered, both = results[0]
    assert "'ep' not in the mesh" in unknown
    assert "'tp' more than once" in twice and "'pp' more than once" in twice_tuple
    assert "ordered sequence" in unordered
    assert "not both" in both


def test_rank_outside_the_mesh_is_refused(pool: DistributedPool) -> None:
    results = pool.run(checks.rank_outside_mesh, 9)
    assert results[:4] == ["9", "10", "9", "10"]
    for message in results[4:]:
        assert message.startswith("MeshError: this rank is not part of the mesh")


def _streams(items: list[dict[str, Any]]) -> dict[tuple[int, int], tuple[Any, ...]]:
    streams: dict[tuple[int, int], list[Any]] = {}
    for item in items:
        streams.setdefault((item["rank"], item["worker"]), []).append(
            (item["torch"], item["random"], item["numpy"])
        )
    return {key: tuple(values) for key, values in streams.items()}


def test_worker_init_fn_gives_every_worker_of_every_rank_its_own_stream(
    pool: DistributedPool,
) -> None:
    first = pool.run(checks.dataloader_worker_streams, 31, True)
    again = pool.run(checks.dataloader_worker_streams, 31, True)
    assert first == again, "reproducible across runs"
    streams = _streams(first[0] + first[1])
    assert sorted(streams) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for kind in range(3):  # torch, random and numpy each: 4 distinct streams
        assert len({tuple(s[kind] for s in stream) for stream in streams.values()}) == 4


def test_without_worker_init_fn_streams_repeat(pool: DistributedPool) -> None:
    """The control: torch's defaults repeat across replicas' workers (the bug being fixed)."""
    results = pool.run(checks.dataloader_worker_streams, 31, False)
    streams = _streams(results[0] + results[1])
    assert streams[(0, 0)] == streams[(1, 0)]  # two data-parallel ranks, identical augmentations


@pytest.mark.parametrize("context", ["spawn", "fork"])
def test_workers_of_ranks_without_a_rank_variable_still_differ(
    pool: DistributedPool, context: str
) -> None:
    """Ranks started by mp.spawn have no RANK: the rank comes from their process group,
    bound in the parent for spawned workers, inherited by forked ones."""
    results = pool.run(checks.dataloader_worker_streams, 31, True, context, True)
    streams = _streams(results[0] + results[1])
    assert sorted(streams) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for kind in range(3):
        assert len({tuple(s[kind] for s in stream) for stream in streams.values()}) == 4


def test_a_group_this_rank_is_not_in_is_named(pool: DistributedPool) -> None:
    results = pool.run(checks.group_without_this_rank, 4)
    assert results[0] == "4"
    for message in results[1:]:
        assert message.startswith("MeshError: this rank is not a member of groups[0]")


def test_the_seeded_mesh_is_remembered_but_not_kept_alive(pool: DistributedPool) -> None:
    """A mesh hwrng kept alive would keep its process groups past destroy_process_group (gloo
    then aborts at exit: 4 runs of 20 of docs/checkpoint.md's example on torch 2.15)."""
    for found in pool.run(checks.the_seeded_mesh_is_not_kept_alive, 7):
        assert found == {
            "held_while_alive": True,
            "kept_on_restore": True,
            "freed": True,
            "forgotten": True,
            "plan_kept": True,
        }
