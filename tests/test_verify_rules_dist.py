"""hwrng.verify over 4 real gloo ranks: never hangs, compares plans, knows pipeline stages."""

from __future__ import annotations

from typing import Any

import dist_verify_checks as checks
import pytest
from helpers import pool_fixture

from hwrng.testing import DistributedPool

pool = pool_fixture(4, timeout=120)


def _one_verdict(results: list[dict[str, Any]]) -> dict[str, Any]:
    first = results[0]
    assert all(r["failures"] == first["failures"] for r in results), "one report everywhere"
    assert all(r["unjudged"] == first["unjudged"] for r in results), "one report everywhere"
    return first


def test_a_rank_without_a_plan_gets_every_rank_a_setup_verdict(pool: DistributedPool) -> None:
    result = _one_verdict(pool.run(checks.one_rank_cannot_build, "reseeded itself"))
    assert set(result["failures"]) == {"setup"}
    ranks, problems = result["failures"]["setup"]
    assert ranks == [1]
    assert problems == [
        "setup failed on rank 1: MeshError: no seed plan is in force (seeded by other means "
        "than hwrng.manual_seed or a preset): pass mesh= and sharded_dims= to say which ranks "
        "should be replicas"
    ]


def test_a_stream_one_rank_lacks_is_judged_among_the_ranks_that_hold_it(
    pool: DistributedPool,
) -> None:
    result = _one_verdict(pool.run(checks.one_rank_cannot_build, "a stream one rank lacks"))
    assert result["ok"], result["text"]
    assert result["streams"] == ["torch.cpu", "state:verify-rule/only-here"]


def test_a_stream_no_rank_holds_gets_every_rank_a_setup_verdict(pool: DistributedPool) -> None:
    result = _one_verdict(pool.run(checks.one_rank_cannot_build, "a stream no rank holds"))
    ranks, problems = result["failures"]["setup"]
    assert ranks == []
    assert problems == ["no rank holds stream(s) ['state:nowhere/at-all']"]


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("streams as one string", "InvalidArgumentError"),
        ("sharded_dims without a mesh", "MeshError"),
        ("a mesh that is not a DeviceMesh", "MeshError"),
    ],
)
def test_bad_arguments_raise_alike_before_any_collective(
    pool: DistributedPool, case: str, error: str
) -> None:
    assert (
        pool.run(checks.bad_arguments_refused_before_any_collective, case)
        == [f"{error} after 0 collective(s)"] * 4
    )


def test_correct_process_groups_pass(pool: DistributedPool) -> None:
    results = pool.run(checks.groups_of_another_rank, "none")
    assert [r["seed"] for r in results] == [5, 6, 5, 6]
    assert _one_verdict(results)["ok"], results[0]["text"]


def test_a_rank_seeded_with_another_ranks_group_fails(pool: DistributedPool) -> None:
    results = pool.run(checks.groups_of_another_rank, "dp group on rank 1")
    assert [r["seed"] for r in results] == [5, 5, 5, 6], "rank 1 took its tp peer's seed"
    result = _one_verdict(results)
    ranks, problems = result["failures"]["plan"]
    assert ranks == [0, 1], result["text"]
    assert "is not the group its other members hold" in problems[0]


def test_a_rank_with_another_seed_fails_the_plan(pool: DistributedPool) -> None:
    result = _one_verdict(pool.run(checks.groups_of_another_rank, "another seed on rank 3"))
    ranks, problems = result["failures"]["plan"]
    assert ranks == [3] and problems[0].startswith("ranks disagree on the seed plan: rank 3")


def test_plans_on_submeshes_of_one_shape_agree(pool: DistributedPool) -> None:
    result = _one_verdict(pool.run(checks.seeded_on_a_submesh))
    assert result["ok"], result["text"]


def test_after_megatron_a_named_state_is_judged_along_tp(pool: DistributedPool) -> None:
    """The preset is given tp_rank: a state with one seed on both tp ranks fails."""
    result = _one_verdict(pool.run(checks.megatron_named_state, False))
    assert set(result["failures"]) == {"state:user/my-tp-rng"}, result["text"]
    ranks, problems = result["failures"]["state:user/my-tp-rng"]
    assert ranks == [0, 1, 2, 3]
    assert problems[0].startswith("shards draw alike: rank 0, rank 1"), problems
    assert not result["unjudged"], "the preset's own streams are judged by what they differ along"


def test_after_a_preset_without_tp_named_states_are_reported_unjudged(
    pool: DistributedPool,
) -> None:
    result = _one_verdict(pool.run(checks.slapo_named_state))
    assert result["ok"], result["text"]
    assert result["unjudged"]["state:user/my-tp-rng"].startswith(
        "ranks that the slapo plan (its terms: pp) does not tell apart were not compared"
    )
    assert "PARTLY" in result["text"] and "not judged: " in result["text"]


def test_after_megatron_a_mesh_judges_named_states(pool: DistributedPool) -> None:
    result = _one_verdict(pool.run(checks.megatron_named_state, True))
    ranks, problems = result["failures"]["state:user/my-tp-rng"]
    assert ranks == [0, 1, 2, 3] and problems[0].startswith("shards draw alike: rank 0")


def test_pipeline_stages_pass_without_naming_a_stage_mesh(pool: DistributedPool) -> None:
    result = _one_verdict(pool.run(checks.pipeline_stages, "none"))
    assert result["ok"], result["text"]


def test_a_stage_rank_that_ran_one_more_op_is_named(pool: DistributedPool) -> None:
    result = _one_verdict(pool.run(checks.pipeline_stages, "one more op on rank 3"))
    assert set(result["failures"]) == {"dtensor"}, result["text"]
    ranks, problems = result["failures"]["dtensor"]
    assert ranks == [2, 3] and "no majority" in problems[0]


def test_verify_on_a_group_refuses_ranks_outside_it(pool: DistributedPool) -> None:
    results = pool.run(checks.outside_the_group)
    assert results[:2] == ["report over 2 ranks, ok=True"] * 2
    for rank in (2, 3):
        assert results[rank].startswith(
            f"DistributedError: this rank ({rank}) is not a member of the group given to verify"
        )


def test_a_rank_out_of_step_is_named_beside_private_submeshes(pool: DistributedPool) -> None:
    """Ops on each rank's own 1-rank mesh do not hide a rank one op ahead on the whole mesh."""
    result = _one_verdict(pool.run(checks.out_of_step_beside_private_submeshes, "none"))
    assert result["ok"], result["text"]
    result = _one_verdict(
        pool.run(checks.out_of_step_beside_private_submeshes, "one more op on rank 3")
    )
    ranks, problems = result["failures"]["dtensor"]
    assert ranks == [3] and problems[0].startswith("replicas disagree: rank 3"), problems
    # on the CPU, DTensor ops draw from torch's CPU generator: rank 3 is off its one replica
    assert set(result["failures"]) == {"dtensor", "torch.cpu"}, result["text"]
    ranks, problems = result["failures"]["torch.cpu"]
    assert ranks == [1, 3] and "no majority" in problems[0], problems


def test_a_named_state_of_one_stage_is_judged_among_its_ranks(pool: DistributedPool) -> None:
    result = _one_verdict(pool.run(checks.state_of_one_stage, "none"))
    assert result["ok"], result["text"]
    assert "state:stage0/head-dropout" in result["text"]
    result = _one_verdict(pool.run(checks.state_of_one_stage, "one seed on both tp ranks"))
    ranks, problems = result["failures"]["state:stage0/head-dropout"]
    assert ranks == [0, 1] and problems[0].startswith("shards draw alike: rank 0"), problems


def test_a_mesh_in_another_rank_order_is_judged_by_its_coordinates(pool: DistributedPool) -> None:
    result = _one_verdict(pool.run(checks.transposed_mesh, "none"))
    assert result["ok"], result["text"]
    result = _one_verdict(pool.run(checks.transposed_mesh, "seed + dp + tp"))
    ranks, problems = result["failures"]["state:transposed/tp-rng"]
    # rank 2 sits at (dp=0, tp=1), rank 1 at (dp=1, tp=0): both seeded 101
    assert ranks == [1, 2], result["text"]
    assert problems == ["shards draw alike: rank 1 {'dp': 1, 'tp': 0}, rank 2 {'dp': 0, 'tp': 1}"]


def test_a_megatron_collision_fails_naming_the_formula_as_the_cause(
    pool: DistributedPool,
) -> None:
    result = _one_verdict(pool.run(checks.megatron_expert_collision))
    stream = "state:hwrng.presets:cpu/expert-parallel-rng"
    assert set(result["failures"]) == {stream}, result["text"]
    ranks, problems = result["failures"][stream]
    assert ranks == [1, 2]
    assert problems[0] == "shards draw alike: rank 1, rank 2"
    assert problems[-1].startswith(
        "cause: Megatron-LM's formula for expert-parallel-rng, seed + 100*pp + 1024 + 100*ep "
        "+ etp, gives ranks that should differ one seed on this layout"
    )
