"""Presets reproduce Megatron-LM's, slapo's, d9d's and torchtitan's per-rank seeds."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hwrng
from hwrng import presets

ranks = st.integers(0, 63)
seeds = st.integers(0, 2**40)


@settings(max_examples=200, deadline=None)
@given(seed=seeds, pp=ranks, tp=ranks, dp=ranks, ep=ranks, etp=ranks, dp_init=st.booleans())
def test_megatron_formula(
    seed: int, pp: int, tp: int, dp: int, ep: int, etp: int, dp_init: bool
) -> None:
    # Megatron-LM _set_random_seed + model_parallel_cuda_manual_seed, written out
    rank_seed = seed + 100 * pp + (10 * dp if dp_init else 0)
    got = presets.megatron_seeds(
        seed,
        pp_rank=pp,
        tp_rank=tp,
        dp_rank=dp,
        ep_rank=ep,
        etp_rank=etp,
        data_parallel_random_init=dp_init,
    )
    assert got == presets.MegatronSeeds(
        seed=rank_seed,
        tensor_parallel=rank_seed + 2718 + tp,
        expert_parallel=rank_seed + 1024 + 100 * ep + etp,
        data_parallel=rank_seed,
    )


@settings(max_examples=200, deadline=None)
@given(
    seed=seeds,
    dp=st.none() | ranks,
    pp=st.none() | ranks,
    tp=st.none() | ranks,
    always=st.booleans(),
)
def test_slapo_formula(
    seed: int, dp: int | None, pp: int | None, tp: int | None, always: bool
) -> None:
    expected = seed + (100 * pp if pp is not None else 0) + (10 * dp if dp is not None else 0)
    got = presets.slapo_seeds(
        seed, dp_rank=dp, pp_rank=pp, tp_rank=tp, always_enable_tp_seed=always
    )
    assert got.seed == expected
    if tp is None:
        assert got.tensor_parallel is None and got.default == expected
    else:
        assert got.tensor_parallel == expected + 2718 + tp
        assert got.default == (got.tensor_parallel if always else expected)


def test_slapo_default_seed_is_2013() -> None:
    assert presets.slapo_seeds().seed == 2013


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**64 - 1), rank=ranks)
def test_d9d_formula(seed: int, rank: int) -> None:
    assert presets.d9d_seed(seed, rank) == (seed + rank) % 2**64


@settings(max_examples=100, deadline=None)
@given(seed=seeds, sizes=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data())
def test_torchtitan_formula_is_rank_seed_reversed(
    seed: int, sizes: list[int], data: st.DataObject
) -> None:
    local = [data.draw(st.integers(0, s - 1)) for s in sizes]
    offset, cumulative = 0, 1
    for rank, size in zip(local, sizes, strict=True):  # torchtitan set_determinism, written out
        offset += rank * cumulative
        cumulative *= size
    assert presets.torchtitan_seed(seed, local, sizes) == seed + offset
    names = [f"d{i}" for i in range(len(sizes))]
    coordinate = dict(zip(names, local, strict=True))
    mesh = dict(zip(names, sizes, strict=True))
    assert hwrng.rank_seed(seed, coordinate, mesh, list(reversed(names))) == seed + offset


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
