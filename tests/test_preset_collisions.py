"""Trainers' seed formulas that give ranks meant to differ one seed: found, warned, avoidable.

The oracle writes each trainer's formula out by hand (from Megatron-LM's
``initialize.py``/``random.py`` and slapo's ``random.py``) and enumerates every
pair of coordinates; hwrng's vectorised search must find the same collisions.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hwrng
from hwrng import presets

DIMS = ("pp", "dp", "tp", "ep", "etp")


def _megatron(dpri: bool) -> dict[str, tuple[Callable[[Mapping[str, int]], int], tuple[str, ...]]]:
    """Megatron-LM's formulas, by hand: stream -> (seed of a coordinate, dims it differs along)."""
    stage = ("pp", "dp") if dpri else ("pp",)

    def base(c: Mapping[str, int]) -> int:
        return 1234 + 100 * c["pp"] + (10 * c["dp"] if dpri else 0)

    return {
        "seed": (base, stage),
        "model-parallel-rng": (lambda c: base(c) + 2718 + c["tp"], (*stage, "tp")),
        "expert-parallel-rng": (
            lambda c: base(c) + 1024 + 100 * c["ep"] + c["etp"],
            (*stage, "ep", "etp"),
        ),
    }


def _brute_force(
    formulas: dict[str, tuple[Callable[[Mapping[str, int]], int], tuple[str, ...]]],
    sizes: Mapping[str, int],
) -> int:
    """How many seeds are shared by coordinates that differ along a stream's dims."""
    shared = 0
    for seed_of, along in formulas.values():
        by_seed: dict[int, set[tuple[int, ...]]] = {}
        for values in itertools.product(*(range(sizes.get(d, 1)) for d in DIMS)):
            coordinate = dict(zip(DIMS, values, strict=True))
            key = tuple(coordinate[d] for d in along)
            by_seed.setdefault(seed_of(coordinate), set()).add(key)
        shared += sum(len(keys) > 1 for keys in by_seed.values())
    return shared


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.fixed_dictionaries({d: st.integers(1, 12) for d in DIMS}).filter(
        lambda s: s["pp"] * s["dp"] * s["tp"] * s["ep"] * s["etp"] <= 3000
    ),
    dpri=st.booleans(),
)
def test_megatron_collisions_are_the_brute_force_ones(sizes: dict[str, int], dpri: bool) -> None:
    formulas = presets.preset_formulas("megatron", data_parallel_random_init=dpri)
    del formulas["data-parallel-rng"]  # the default stream's formula, under another name
    _, total = presets.find_collisions(formulas, 1234, sizes)
    assert total == _brute_force(_megatron(dpri), sizes)


@pytest.mark.parametrize(
    ("sizes", "dpri", "stream", "first", "second"),
    [
        ({"pp": 2, "ep": 2}, False, "expert-parallel-rng", {"pp": 0, "ep": 1}, {"pp": 1, "ep": 0}),
        ({"pp": 2, "dp": 11}, True, "seed", {"pp": 0, "dp": 10}, {"pp": 1, "dp": 0}),
    ],
    ids=["pp2-ep2", "dp11-data-parallel-random-init"],
)
def test_the_layouts_megatron_collides_on(
    sizes: dict[str, int], dpri: bool, stream: str, first: dict[str, int], second: dict[str, int]
) -> None:
    formulas = presets.preset_formulas("megatron", data_parallel_random_init=dpri)
    found, _ = presets.find_collisions(formulas, 1234, sizes)
    named = [(c.formula.stream, c.first, c.second) for c in found]
    assert any(
        s == stream
        and all(a[d] == v for d, v in first.items())
        and all(b[d] == v for d, v in second.items())
        for s, a, b in named
    ), named
    # one rank fewer along either dim: nothing collides
    smaller = {d: n - 1 if n == max(sizes.values()) else n for d, n in sizes.items()}
    assert presets.find_collisions(formulas, 1234, smaller)[1] == 0


def test_megatron_warns_at_seeding_time_naming_the_stream_and_ranks() -> None:
    tracker = hwrng.RNGStatesTracker("cpu")
    with pytest.warns(hwrng.HwrngWarning, match=r"expert-parallel-rng: \{'pp': 0, 'ep': 1") as w:
        seeds = presets.megatron_manual_seed(
            1234, pp_rank=0, ep_rank=0, sizes={"pp": 2, "ep": 2}, tracker=tracker, platform="cpu"
        )
    assert "collision_free=True" in str(w[0].message)
    assert seeds.expert_parallel == 1234 + 1024, "the numbers stay Megatron-LM's"
    # without sizes, a rank warns for what its own coordinates prove exists: (1, 1) sees (0, 1)
    # and (1, 0); (0, 0) proves nothing
    with pytest.warns(hwrng.HwrngWarning, match="expert-parallel-rng"):
        presets.megatron_manual_seed(1234, pp_rank=1, ep_rank=1, tracker=tracker, platform="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        presets.megatron_manual_seed(1234, tracker=tracker, platform="cpu")
        presets.megatron_manual_seed(
            1234, pp_rank=1, sizes={"pp": 2, "tp": 8}, tracker=tracker, platform="cpu"
        )


@pytest.mark.parametrize("preset", ["megatron", "slapo"])
def test_collision_free_gives_every_stream_and_rank_its_own_seed(preset: str) -> None:
    sizes = {"pp": 4, "dp": 12, "tp": 4} | ({"ep": 4, "etp": 2} if preset == "megatron" else {})
    formulas = presets.preset_formulas(preset, sizes=sizes, collision_free=True)
    seen: dict[int, tuple[str, tuple[int, ...]]] = {}
    for stream, formula in formulas.items():
        if stream == "data-parallel-rng":
            continue  # Megatron's data-parallel stream is the default one by design
        for values in itertools.product(*(range(sizes[d]) for d in formula.along)):
            seed = formula.seed(7, dict(zip(formula.along, values, strict=True)))
            assert seen.setdefault(seed, (stream, values)) == (stream, values)
    tracker = hwrng.RNGStatesTracker("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if preset == "megatron":
            presets.megatron_manual_seed(
                7, pp_rank=3, dp_rank=11, ep_rank=3, collision_free=True, sizes=sizes,
                data_parallel_random_init=True, tracker=tracker, platform="cpu",
            )  # fmt: skip
        else:
            presets.slapo_set_random_seed(
                7, pp_rank=3, dp_rank=11, tp_rank=1, collision_free=True, sizes=sizes,
                tracker=tracker, platform="cpu",
            )  # fmt: skip
    plan = hwrng.current_seeding()
    assert plan is not None and plan.source == f"{preset} (collision-free)"


def test_collision_free_needs_sizes_and_refuses_before_any_change() -> None:
    import torch

    before = torch.get_rng_state()
    with pytest.raises(hwrng.InvalidArgumentError, match="pass sizes="):
        presets.megatron_manual_seed(5, collision_free=True, platform="cpu")
    with pytest.raises(hwrng.MeshError, match="outside sizes"):
        presets.megatron_manual_seed(5, ep_rank=2, sizes={"ep": 2}, platform="cpu")
    assert torch.equal(before, torch.get_rng_state())


def _plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hwrng", "plan", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_hwrng_plan_preset_names_each_colliding_pair_and_exits_1() -> None:
    result = _plan("--preset", "megatron", "--mesh", "pp=2,ep=2", "--seed", "1234")
    assert result.returncode == 1, result.stderr
    assert (
        "expert-parallel-rng: rank 1 {'pp': 0, 'ep': 1} and rank 2 {'pp': 1, 'ep': 0} share seed "
        "2358 (Megatron-LM's formula seed + 100*pp + 1024 + 100*ep + etp)"
    ) in result.stdout
    assert "--collision-free" in result.stdout
    rows = result.stdout.split("\n\n")[0].splitlines()[3:]
    assert [row.split()[5] for row in rows] == ["2258", "2358", "2358", "2458"]
    fixed = _plan(
        "--preset", "megatron", "--mesh", "pp=2,ep=2", "--seed", "1234", "--collision-free"
    )
    assert fixed.returncode == 0 and "no two ranks that should differ share a seed" in fixed.stdout


def test_hwrng_plan_preset_json_and_refusals() -> None:
    result = _plan(
        "--preset", "megatron", "--mesh", "pp=2,dp=11", "--seed", "0",
        "--data-parallel-random-init", "--json",
    )  # fmt: skip
    document: dict[str, Any] = json.loads(result.stdout)
    assert result.returncode == 1 and document["collisions_total"] > 0
    assert document["seeds"][0] == {
        "seed": 0, "model-parallel-rng": 2718, "expert-parallel-rng": 1024, "data-parallel-rng": 0
    }  # fmt: skip
    assert document["collisions"][0]["ranks"] == [10, 11]
    for preset in ("d9d", "torchtitan"):
        ok = _plan("--preset", preset, "--mesh", "pp=3,tp=4", "--sharded", "pp", "--seed", "1")
        assert ok.returncode == 0, ok.stdout + ok.stderr
    unknown = _plan("--preset", "megatron", "--mesh", "pp=2,cp=2", "--seed", "1")
    assert unknown.returncode == 2
    assert "the megatron preset knows the dims pp, dp, tp, ep, etp, not cp" in unknown.stderr
    option = _plan("--mesh", "pp=2", "--seed", "1", "--collision-free")
    assert option.returncode == 2 and "options of --preset" in option.stderr
