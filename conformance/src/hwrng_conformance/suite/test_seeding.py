"""Rules for seeding: determinism, distinctness over the full range, refusals."""

from __future__ import annotations

import pytest
import torch

import hwrng
from hwrng_conformance.helpers import all_distinct, draw_default

FULL_RANGE_SEEDS = [0, 1, 2, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**63, 2**64 - 1]


def test_manual_seed_is_deterministic(platform: hwrng.Platform) -> None:
    platform.manual_seed(2024)
    first = draw_default(platform)
    platform.manual_seed(2024)
    assert torch.equal(draw_default(platform), first)


def test_manual_seed_full_range_gives_distinct_streams(platform: hwrng.Platform) -> None:
    draws = []
    for seed in FULL_RANGE_SEEDS:
        platform.manual_seed(seed)
        draws.append(draw_default(platform))
    assert all_distinct(draws), "seeds that differ (even by 2**32) must draw differently"


@pytest.mark.parametrize(
    "seed",
    [-1, 2**64, 2**70, 1.5, "7", True, None],
    ids=["-1", "2**64", "2**70", "float", "str", "bool", "None"],
)
def test_manual_seed_refuses_bad_seeds(platform: hwrng.Platform, seed: object) -> None:
    platform.manual_seed(5)
    expected = draw_default(platform)
    platform.manual_seed(5)
    with pytest.raises(hwrng.InvalidSeedError):
        platform.manual_seed(seed)  # type: ignore[arg-type]
    with pytest.raises(hwrng.InvalidSeedError):
        platform.manual_seed_all(seed)  # type: ignore[arg-type]
    assert torch.equal(draw_default(platform), expected)


def test_manual_seed_all_seeds_every_device(platform: hwrng.Platform) -> None:
    platform.manual_seed_all(77)
    for index in range(platform.device_count()):
        assert platform.get_seed_offset(platform.generator(index)) == (77, 0)
