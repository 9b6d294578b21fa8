"""verify's judging, proven with real values on simulated worlds of up to 4,096 ranks.

Every rank of a simulated job runs hwrng's judging algorithm (the code that runs
on a cluster) in one process, over an in-memory stand-in for the collectives
(``hwrng.verify._simulator``). For random meshes of up to 4 dims, random plans
and seedings with injected bugs, the verdict of every check equals a brute-force
oracle that sees every rank at once (``verify_oracle``), and the ranks the
owners name are exactly the oracle's offenders.
"""

from __future__ import annotations

import math

import pytest
import verify_oracle as oracle
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hwrng.verify._judging import judging
from hwrng.verify._simulator import Traffic, grid, simulate

CHECKS = ("plan stream", "named state", "dtensor")


@st.composite
def jobs(draw: st.DrawFn, max_world: int = 512) -> oracle.Job:
    ndims = draw(st.integers(1, 4))
    sizes = tuple(draw(st.lists(st.integers(1, 8), min_size=ndims, max_size=ndims)))
    assume(2 <= math.prod(sizes) <= max_world)
    sharded = tuple(draw(st.permutations(range(ndims)))[: draw(st.integers(0, ndims))])
    bug = draw(st.sampled_from(oracle.BUGS))
    world = math.prod(sizes)
    dims = tuple(sorted(draw(st.sets(st.integers(0, ndims - 1), min_size=1))))
    ranks = tuple(draw(st.lists(st.integers(0, world - 1), min_size=2, max_size=2)))
    empty = frozenset(
        draw(st.sets(st.integers(0, world - 1), max_size=3)) if bug == "empty" else ()
    )
    return oracle.Job(sizes, sharded, bug, dims, ranks, empty)


def _judge_simulated(job: oracle.Job, traffic: Traffic | None = None) -> list[oracle.Verdict]:
    places = grid(job.sizes)
    held = {place.rank: job.observations(place.rank) for place in places}
    outcomes = simulate(
        places,
        lambda place: judging(held[place.rank], place, str, shown=4, limit=10**9),
        traffic,
    )
    first = outcomes[0].judged
    assert all(o.judged == first for o in outcomes), "every rank reaches the same verdicts"
    verdicts = []
    for check in range(len(CHECKS)):
        owned = [p for o in outcomes for p in o.owned if p.check == check]
        named = frozenset(r for p in owned for r in p.ranks)
        assert first[check].hidden + len(first[check].problems) == len(owned)
        verdicts.append(oracle.Verdict(first[check].ok, named, len(owned)))
    return verdicts


def _expected(job: oracle.Job) -> list[oracle.Verdict]:
    every = [job.observations(rank) for rank in range(job.world)]
    return [oracle.judge([held[check] for held in every]) for check in range(len(CHECKS))]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs())
def test_the_verdict_and_the_offenders_are_the_oracles(job: oracle.Job) -> None:
    assert _judge_simulated(job) == _expected(job), job


@pytest.mark.parametrize(
    "job",
    [
        oracle.Job((2, 2, 2), (1, 2), "additive", dims=(1, 2)),  # seed = base + pp + tp
        oracle.Job((2, 2, 2), (1, 2), "sound"),
        oracle.Job((4, 2, 2), (0, 1, 2), "megatron", dims=(1, 2)),  # 100*pp + 100*ep
        oracle.Job((16, 16, 16), (1, 2), "additive", dims=(1, 2)),
        oracle.Job((8, 8, 8, 8), (2, 3), "copied", ranks=(4095, 7)),
        oracle.Job((64, 64), (1,), "deviant", ranks=(2049, 0)),
        oracle.Job((4, 8, 128), (1, 2), "out of step", ranks=(3000, 0)),
        oracle.Job((512, 8), (1,), "sound"),
    ],
    ids=lambda job: f"{'x'.join(map(str, job.sizes))}-{job.bug}",
)
def test_chosen_jobs_up_to_4096_ranks(job: oracle.Job) -> None:
    expected = _expected(job)
    assert _judge_simulated(job) == expected
    assert job.bug == "sound" or not all(v.ok for v in expected), "the bug must show"


def test_the_issue_case_seed_plus_pp_plus_tp_fails_naming_both_ranks() -> None:
    """dp=2 x pp=2 x tp=2, sharded along pp and tp, seeded base + pp + tp: (0,1), (1,0) collide."""
    job = oracle.Job((2, 2, 2), (1, 2), "additive", dims=(1, 2))
    plan_stream = _judge_simulated(job)[0]
    assert not plan_stream.ok
    assert plan_stream.offenders == {1, 2, 5, 6}  # pp=0,tp=1 and pp=1,tp=0, on both dp rows


def test_a_passing_job_sends_as_much_per_rank_at_4096_ranks_as_at_256() -> None:
    """Words each rank hands to collectives, and how many collectives: flat as the world grows.

    The mesh is (world / 8) x 8, sharded along the dim of 8: the dim that grows is one of
    replicas, which costs one fixed-size reduction however long it is.
    """
    costs = []
    for world in (256, 4096):
        traffic = Traffic()
        job = oracle.Job((world // 8, 8), (1,), "sound")
        assert all(v.ok for v in _judge_simulated(job, traffic))
        costs.append((traffic.collectives, max(traffic.words)))
    assert costs[0] == costs[1]
