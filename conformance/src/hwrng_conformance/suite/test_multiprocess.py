"""Rules over real processes: collectives, mesh seeding and the DTensor adapter."""

from __future__ import annotations

import itertools

import pytest

import hwrng
from hwrng.testing import DistributedPool
from hwrng_conformance import checks


def test_broadcast_reaches_every_rank(platform: hwrng.Platform, dist_pool: DistributedPool) -> None:
    results = dist_pool.run(checks.broadcast_from_each_rank, platform.name)
    for src in range(dist_pool.nproc):
        expected = [float(src * 10 + 1)] * 3
        assert all(received[src] == expected for received in results)


def _mesh_shape(nproc: int) -> tuple[int, int]:
    if nproc % 2:
        pytest.skip(f"the 2-D mesh rules need an even --hwrng-nproc (got {nproc})")
    return (2, nproc // 2)


def test_seeding_replicas_equal_shards_distinct(
    platform: hwrng.Platform, dist_pool: DistributedPool
) -> None:
    shape = _mesh_shape(dist_pool.nproc)
    results = dist_pool.run(checks.seeded_draws, platform.name, 1000, shape)
    for a, b in itertools.combinations(results, 2):
        same_shard = a["coordinate"][1] == b["coordinate"][1]
        for key in ("device", "cpu", "random", "numpy"):
            assert (a[key] == b[key]) == same_shard, (key, a["coordinate"], b["coordinate"])
        assert (a["seed"] == b["seed"]) == same_shard
    assert sorted({r["seed"] for r in results}) == [1000 + i for i in range(shape[1])]


@pytest.mark.hwrng_requires("dtensor")
def test_dtensor_adapter_replicas_equal_shards_distinct(
    platform: hwrng.Platform, dist_pool: DistributedPool
) -> None:
    shape = _mesh_shape(dist_pool.nproc)
    results = dist_pool.run(checks.dtensor_random_ops, platform.name, 5, shape)
    for a, b in itertools.combinations(results, 2):
        same_shard = a["coordinate"][-1] == b["coordinate"][-1]
        assert (a["local"] == b["local"]) == same_shard, (a["coordinate"], b["coordinate"])
    assert len({tuple(r["counter"]) for r in results}) == 1, "every rank must end at one offset"
