"""Presets reproduce Megatron-LM's, slapo's, d9d's and torchtitan's per-rank seeds."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch

import hwrng
from hwrng import presets

# Literal tables, each value worked out by hand from the upstream code:
# Megatron-LM megatron/training/initialize.py _set_random_seed (seed + 100 * pp, + 10 * dp with
# data_parallel_random_init) and megatron/core/tensor_parallel/random.py
# model_parallel_cuda_manual_seed (tensor: + 2718 + tp; expert: + 1024 + 100 * ep + etp;
# data-parallel: the seed). Columns: seed, pp, tp, dp, ep, etp, dp_init -> seed, tp, ep, dp.
MEGATRON = [
    ((1234, 0, 0, 0, 0, 0, False), (1234, 3952, 2258, 1234)),
    ((1234, 1, 3, 2, 2, 1, False), (1334, 4055, 2559, 1334)),
    ((1234, 1, 3, 2, 2, 1, True), (1354, 4075, 2579, 1354)),
    ((42, 3, 7, 5, 0, 3, True), (392, 3117, 1419, 392)),
    ((2**64 - 1, 1, 0, 0, 0, 0, False), (99, 2817, 1123, 99)),  # wraps modulo 2**64
]


@pytest.mark.parametrize(("given", "expected"), MEGATRON)
def test_megatron_table(given: tuple[int, ...], expected: tuple[int, int, int, int]) -> None:
    seed, pp, tp, dp, ep, etp, dp_init = given
    got = presets.megatron_seeds(
        seed,
        pp_rank=pp,
        tp_rank=tp,
        dp_rank=dp,
        ep_rank=ep,
        etp_rank=etp,
        data_parallel_random_init=bool(dp_init),
    )
    assert (got.seed, got.tensor_parallel, got.expert_parallel, got.data_parallel) == expected


# slapo slapo/random.py set_random_seed: seed + 100 * pp + 10 * dp (ranks that are None count
# nothing); TP stream seed + 2718 + tp; always_enable_tp_seed puts it on the default generator.
# Columns: seed, dp, pp, tp, always -> seed, default, tensor_parallel.
SLAPO = [
    ((2013, None, None, None, False), (2013, 2013, None)),
    ((2013, 1, 2, 3, False), (2223, 2223, 4944)),
    ((2013, 1, 2, 3, True), (2223, 4944, 4944)),
    ((7, None, None, 0, False), (7, 7, 2725)),
    ((100, 4, None, None, True), (140, 140, None)),
]


@pytest.mark.parametrize(("given", "expected"), SLAPO)
def test_slapo_table(given: tuple[Any, ...], expected: tuple[Any, ...]) -> None:
    seed, dp, pp, tp, always = given
    got = presets.slapo_seeds(
        seed, dp_rank=dp, pp_rank=pp, tp_rank=tp, always_enable_tp_seed=always
    )
    assert (got.seed, got.default, got.tensor_parallel) == expected


def test_slapo_default_seed_is_2013() -> None:
    assert presets.slapo_seeds().seed == 2013


# d9d d9d/internals/determinism/seed.py set_seeds: (seed + rank along one dim) % 2**64.
@pytest.mark.parametrize(("seed", "rank", "expected"), [(5, 3, 8), (0, 0, 0), (2**64 - 2, 5, 3)])
def test_d9d_table(seed: int, rank: int, expected: int) -> None:
    assert presets.d9d_seed(seed, rank) == expected


# torchtitan torchtitan/distributed/utils.py set_determinism: seed + sum(local_rank_i *
# prod(size_j for j < i)) over distinct_seed_mesh_dims -- the first dim varies fastest.
TORCHTITAN = [
    ((10, [1, 2], [2, 3]), 15),
    ((10, [0, 1, 1], [2, 2, 2]), 16),
    ((0, [3], [4]), 3),
    ((100, [1, 0], [2, 5]), 101),
]


@pytest.mark.parametrize(("given", "expected"), TORCHTITAN)
def test_torchtitan_table(given: tuple[int, list[int], list[int]], expected: int) -> None:
    seed, local, sizes = given
    assert presets.torchtitan_seed(seed, local, sizes) == expected
    names = [f"d{i}" for i in range(len(sizes))]
    coordinate = dict(zip(names, local, strict=True))
    mesh = dict(zip(names, sizes, strict=True))
    assert hwrng.rank_seed(seed, coordinate, mesh, list(reversed(names))) == expected


def test_preset_input_checks() -> None:
    with pytest.raises(hwrng.MeshError, match="pp_rank must be a non-negative integer"):
        presets.megatron_seeds(1, pp_rank=-1)
    with pytest.raises(hwrng.InvalidSeedError):
        presets.megatron_seeds(-1)
    with pytest.raises(hwrng.MeshError, match="tp_rank"):
        presets.slapo_seeds(1, tp_rank=True)  # type: ignore[arg-type]
    with pytest.raises(hwrng.MeshError, match="outside a dim of size 2"):
        presets.torchtitan_seed(1, [2], [2])
    with pytest.raises(hwrng.MeshError, match="2 local ranks for 1 dim sizes"):
        presets.torchtitan_seed(1, [0, 0], [2])
    with pytest.raises(hwrng.MeshError, match="sequence such as"):
        presets.torchtitan_set_seed(1, object(), "pp")  # type: ignore[arg-type]
    assert presets.megatron_seeds(2**64 - 1, pp_rank=1).seed == 99, "seeds wrap modulo 2**64"
    assert presets.megatron_seeds(1, pp_rank=np.int64(2)).seed == 201, "numpy ranks are ranks"
    with pytest.raises(hwrng.MeshError, match="ordered sequence"):
        presets.torchtitan_set_seed(1, object(), {"pp"})  # type: ignore[arg-type]


def test_presets_refuse_before_changing_anything() -> None:
    from hwrng import TrackerError

    tracker = hwrng.RNGStatesTracker("cpu")
    tracker.add("keep", 1)
    torch.manual_seed(3)
    before = (torch.get_rng_state(), random.getstate())
    # expert stream 10 + 1024 + 1600 + 94 == model stream 10 + 2718 + 0: Megatron raises halfway
    with pytest.raises(TrackerError, match="would share seed 2728"):
        presets.megatron_manual_seed(10, ep_rank=16, etp_rank=94, tracker=tracker, platform="cpu")
    with tracker.fork("keep"), pytest.raises(TrackerError, match="forked"):
        presets.slapo_set_random_seed(5, tp_rank=0, tracker=tracker, platform="cpu")
    assert torch.equal(before[0], torch.get_rng_state()) and before[1] == random.getstate()
    assert tracker.names == ["keep"]


def test_megatron_manual_seed_fills_the_tracker() -> None:
    tracker = hwrng.RNGStatesTracker("cpu")
    tracker.add("stale", 1)
    with pytest.warns(hwrng.HwrngWarning, match="expert-parallel-rng"):  # (0, 2) and (1, 1)
        seeds = presets.megatron_manual_seed(
            1234, pp_rank=1, tp_rank=3, ep_rank=2, etp_rank=1, tracker=tracker, platform="cpu"
        )
    assert seeds.seed == 1334
    assert tracker.seeds == {
        "data-parallel-rng": 1334,
        "model-parallel-rng": 1334 + 2718 + 3,
        "expert-parallel-rng": 1334 + 1024 + 201,
    }
    drawn = (torch.rand(3), random.random(), float(np.random.rand()))
    torch.manual_seed(1334)
    random.seed(1334)
    np.random.seed(1334)
    assert torch.equal(drawn[0], torch.rand(3)) and drawn[1:] == (
        random.random(),
        float(np.random.rand()),
    )
    with tracker.fork():  # model-parallel-rng by default, as in Megatron
        forked = torch.rand(3)
    torch.manual_seed(1334 + 2718 + 3)
    assert torch.equal(forked, torch.rand(3))


def test_megatron_uses_the_process_wide_tracker() -> None:
    presets.megatron_manual_seed(5, platform="cpu")
    tracker = presets.get_rng_tracker("cpu")
    assert tracker is presets.get_rng_tracker(hwrng.get_platform("cpu"))
    assert tracker.names == ["data-parallel-rng", "model-parallel-rng", "expert-parallel-rng"]


@pytest.mark.parametrize("always", [False, True])
def test_slapo_set_random_seed(always: bool) -> None:
    tracker = hwrng.RNGStatesTracker("cpu")
    seed = presets.slapo_set_random_seed(
        100,
        dp_rank=1,
        pp_rank=2,
        tp_rank=1,
        always_enable_tp_seed=always,
        tracker=tracker,
        platform="cpu",
    )
    assert seed == 310
    assert tracker.seeds == {"model-parallel-rng": 310 + 2718 + 1}
    default = torch.rand(2)
    torch.manual_seed(310 + 2718 + 1 if always else 310)
    assert torch.equal(default, torch.rand(2))


def test_slapo_without_tp_leaves_the_tracker() -> None:
    tracker = hwrng.RNGStatesTracker("cpu")
    tracker.add("keep", 1)
    assert presets.slapo_set_random_seed(7, tracker=tracker, platform="cpu") == 7
    assert tracker.names == ["keep"]


@pytest.mark.parametrize("flag", ["no", "", 1, None])
def test_trainer_flags_must_be_bools(flag: object) -> None:
    with pytest.raises(hwrng.InvalidArgumentError, match="data_parallel_random_init"):
        presets.megatron_seeds(1, dp_rank=3, data_parallel_random_init=flag)  # type: ignore[arg-type]
    with pytest.raises(hwrng.InvalidArgumentError, match="always_enable_tp_seed"):
        presets.slapo_seeds(1, tp_rank=1, always_enable_tp_seed=flag)  # type: ignore[arg-type]
