"""Per-rank cost at scale: one simulated rank of worlds of 256, 4,096 and 16,384 ranks.

Each world runs ``tests/scale_probe.py`` in a fresh interpreter under torch's fake
process group: the serialised entry, the save and load peaks of Python
allocations (tracemalloc) and the bytes handed to collectives must stay within
25% of the 256-rank figure, and verify's within 2x. Then DCP's own global
planning, simulated over 16,384 ranks as torch's test_planner.py does, with the
entries RNGState makes: one shared entry written once, one entry per rank.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sealed import opened
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner

import hwrng

PROBE = Path(__file__).with_name("scale_probe.py")
WORLDS = (256, 4096, 16384)


@pytest.fixture(scope="module")
def probes() -> dict[int, dict[str, Any]]:
    found = {}
    for world in WORLDS:
        result = subprocess.run(
            [sys.executable, str(PROBE), str(world)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        found[world] = json.loads(result.stdout)
    return found


def test_the_simulated_ranks_saved_their_own_entry_and_verified(
    probes: dict[int, dict[str, Any]],
) -> None:
    for world, probe in probes.items():
        assert probe["keys"] == ["job", f"rank_{probe['rank']}"], world
        assert probe["verify_ok"], world


@pytest.mark.parametrize(
    ("phase", "measure", "bound"),
    [
        ("entry", "entry_bytes", 1.25),
        ("save", "peak_bytes", 1.25),
        ("save", "collective_bytes", 1.25),
        ("load", "peak_bytes", 1.25),
        ("load", "collective_bytes", 1.25),
        ("verify", "peak_bytes", 2.0),
        ("verify", "collective_bytes", 2.0),
    ],
)
def test_a_per_rank_cost_stays_flat_as_the_world_grows(
    probes: dict[int, dict[str, Any]], phase: str, measure: str, bound: float
) -> None:
    def cost(world: int) -> float:
        probe = probes[world]
        return float(probe[measure] if phase == "entry" else probe[phase][measure])

    base = cost(WORLDS[0])
    assert base > 0
    for world in WORLDS[1:]:
        assert cost(world) <= bound * base, (
            f"{phase} {measure}: {cost(world):.0f} at {world} ranks, {base:.0f} at {WORLDS[0]}"
        )


def test_every_phase_talks_in_a_few_fixed_size_collectives(
    probes: dict[int, dict[str, Any]],
) -> None:
    for probe in probes.values():
        assert probe["save"]["collectives"] == 1 and probe["save"]["collective_bytes"] < 100
        assert probe["load"]["collectives"] == 2 and probe["load"]["collective_bytes"] < 200
        assert probe["verify"]["collective_bytes"] < 4096


# -- DCP's global planning over 16,384 ranks, as torch/test/distributed/checkpoint does --------


WORLD = 16384


@pytest.fixture(scope="module")
def entry() -> tuple[hwrng.RNGState, dict[str, bytes]]:
    """One real entry of a world of one; the other ranks' are the same under their own keys."""
    hwrng.manual_seed(5, platform="cpu")
    state = hwrng.RNGState()
    return state, state.state_dict()


def _rank_state(entry: dict[str, bytes], rank: int) -> dict[str, Any]:
    return {"rng": {"job": entry["job"], f"rank_{rank}": entry["rank_0"]}}


def _local_save_plan(entry: dict[str, bytes], rank: int) -> Any:
    """What DCP's default planner plans on ``rank`` (as ``dcp.save`` runs it there)."""
    planner = DefaultSavePlanner()
    planner.set_up_planner(_rank_state(entry, rank), is_coordinator=rank == 0)
    return planner.create_local_plan()


@pytest.fixture(scope="module")
def local_plans(entry: tuple[hwrng.RNGState, dict[str, bytes]]) -> list[Any]:
    return [_local_save_plan(entry[1], rank) for rank in range(WORLD)]


_global: dict[bool, Any] = {}


def _global_plan(saved: dict[str, bytes], local_plans: list[Any], lowest: bool) -> Any:
    """The global save plan and metadata of hwrng.RNGSavePlanner (once per option)."""
    if lowest not in _global:
        planner = hwrng.RNGSavePlanner(dedup_save_to_lowest_rank=lowest)
        planner.set_up_planner(_rank_state(saved, 0), is_coordinator=True)
        _global[lowest] = planner.create_global_plan(local_plans)
    return _global[lowest]


@pytest.mark.parametrize("lowest", [False, True], ids=["balanced", "dedup_save_to_lowest_rank"])
def test_the_save_planner_plans_what_dcps_default_plans(
    entry: tuple[hwrng.RNGState, dict[str, bytes]], lowest: bool
) -> None:
    """Its only change is a linear merge of the mappings (DCP's own is quadratic in ranks)."""
    _, saved = entry
    local = [_local_save_plan(saved, rank) for rank in range(2048)]
    planned = []
    for kind in (DefaultSavePlanner, hwrng.RNGSavePlanner):
        planner = kind(dedup_save_to_lowest_rank=lowest)
        planner.set_up_planner(_rank_state(saved, 0), is_coordinator=True)
        planned.append(planner.create_global_plan(local))
    (default_plans, default_metadata), (plans, metadata) = planned
    assert plans == default_plans
    assert metadata.planner_data == default_metadata.planner_data
    assert metadata.state_dict_metadata == default_metadata.state_dict_metadata


@pytest.mark.parametrize("lowest", [False, True], ids=["balanced", "dedup_save_to_lowest_rank"])
def test_dcp_plans_a_save_of_16384_ranks_one_shared_entry_and_one_per_rank(
    entry: tuple[hwrng.RNGState, dict[str, bytes]], local_plans: list[Any], lowest: bool
) -> None:
    _, saved = entry
    global_plans, metadata = _global_plan(saved, local_plans, lowest)
    keys = set(metadata.state_dict_metadata)
    assert keys == {"rng.job"} | {f"rng.rank_{r}" for r in range(WORLD)}
    writers = [
        r for r, plan in enumerate(global_plans) for i in plan.items if i.index.fqn == "rng.job"
    ]
    assert len(writers) == 1, "the shared entry is written once"
    if lowest:
        assert writers == [0]
    for rank in (0, 1, WORLD // 2, WORLD - 1):  # every rank writes its own entry, and no other
        own = {i.index.fqn for i in global_plans[rank].items} - {"rng.job"}
        assert own == {f"rng.rank_{rank}"}
    per_plan = max(len(plan.items) for plan in global_plans)
    assert per_plan <= 2, "no rank writes more than its own entry and the shared one"


def test_dcp_plans_a_load_of_16384_ranks_and_of_a_grown_world(
    entry: tuple[hwrng.RNGState, dict[str, bytes]], local_plans: list[Any]
) -> None:
    state, saved = entry
    _, metadata = _global_plan(saved, local_plans, False)
    for rank in (0, WORLD // 2, WORLD - 1):
        loader = DefaultLoadPlanner()
        loader.set_up_planner(_rank_state(saved, rank), metadata, is_coordinator=rank == 0)
        reads = {item.dest_index.fqn for item in loader.create_local_plan().items}
        assert reads == {"rng.job", f"rng.rank_{rank}"}
    # a rank the world gained: the default planner stops; RNGLoadPlanner reads the shared entry
    template = state.state_dict()
    grown = {"rng": {"job": template["job"], f"rank_{WORLD}": template["rank_0"]}}
    loader = DefaultLoadPlanner()
    loader.set_up_planner(grown, metadata, is_coordinator=False)
    with pytest.raises(
        RuntimeError, match=f"Missing key in checkpoint state_dict: rng.rank_{WORLD}"
    ):
        loader.create_local_plan()
    loader = hwrng.RNGLoadPlanner()
    loader.set_up_planner(grown, metadata, is_coordinator=False)
    reads = {item.dest_index.fqn for item in loader.create_local_plan().items}
    assert reads == {"rng.job"}
    assert state.missing == {f"rank_{WORLD}"}


def test_the_shared_entry_holds_the_job_not_the_ranks(
    entry: tuple[hwrng.RNGState, dict[str, bytes]],
) -> None:
    _, saved = entry
    job = opened(saved["job"])
    assert set(job) == {"format", "world_size", "nonce", "plan", "position", "folder"}
    assert job["folder"] is None  # DCP: no folder of per-rank files
    assert len(saved["job"]) < 4096
