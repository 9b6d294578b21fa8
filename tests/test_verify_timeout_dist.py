"""hwrng.verify never waits forever: 4 real gloo ranks, one of them absent or at odds.

verify meets its peers through the job's rendezvous store before any collective,
within ``timeout``: the ranks that arrived raise ``DistributedError`` naming the
rank that did not (asleep, or stopped with its sockets open), and a rank alone
with ``group=`` gets a verdict naming the mismatch -- not a transport timeout.
Each test is bounded by the pool's own timeout, so a regression fails instead
of hanging; the timeouts are 1.5 s, so each test takes seconds.
"""

from __future__ import annotations

import datetime

import dist_verify_timeout_checks as checks
import pytest
from helpers import pool_fixture

from hwrng.testing import DistributedPool

pool = pool_fixture(4, timeout=60)

#: Seconds beyond the timeout a rank may take to raise (a loaded 2-core machine).
MARGIN = 3.0


@pytest.mark.parametrize("fault", ["sleeping", "stopped", "sleeping, in a large group"])
def test_the_ranks_that_arrived_raise_within_the_timeout_naming_the_absent_one(
    pool: DistributedPool, fault: str
) -> None:
    results = pool.run(checks.absent_rank, fault)
    for rank in (0, 2, 3):
        outcome, seconds = results[rank]["outcome"], results[rank]["seconds"]
        assert outcome.startswith(
            "DistributedError: hwrng.verify over all 4 ranks: not every rank arrived within "
            "timeout=1.5 s; did not arrive: rank 1"
        ), outcome
        assert seconds <= checks.TIMEOUT + MARGIN, seconds
    # the first rank to arrive waits the timeout; one that arrived later stops with it
    assert max(results[r]["seconds"] for r in (0, 2, 3)) >= checks.TIMEOUT - 0.5
    late = results[1]["outcome"]
    assert late.startswith(
        "DistributedError: hwrng.verify over all 4 ranks: the other ranks stopped waiting "
        "(timeout=1.5 s) before this rank (1) arrived"
    ), late
    assert results[1]["seconds"] < MARGIN, "a late rank raises at once, not after a timeout"
    assert [r["again"] for r in results] == ["report ok=True"] * 4, "the ranks stay in step"


@pytest.mark.parametrize("slow_watcher", [False, True], ids=["together", "slow watcher"])
def test_a_rank_alone_with_group_gets_a_verdict_naming_the_mismatch(
    pool: DistributedPool, slow_watcher: bool
) -> None:
    results = pool.run(checks.mixed_groups, slow_watcher)
    for rank, result in enumerate(results):
        outcome = result["outcome"]
        size = 2 if rank == 1 else 4
        assert outcome == (
            f"report over {size}: setup [0, 1]: the ranks' arguments differ: rank 0 called "
            "hwrng.verify over all 4 ranks while rank 1 called it over ranks [0, 1]: every "
            "rank of a group must call verify with the same group=, in the same order"
        ), (rank, outcome)
        assert result["seconds"] < 15, "found as the ranks wait, not after the 30 s timeout"
        assert result["again"] == "report ok=True", "the ranks stay in step"


def test_calls_over_a_group_and_over_the_world_stay_in_step(pool: DistributedPool) -> None:
    results = pool.run(checks.group_calls_stay_in_step)
    assert results == [["report ok=True"] * 3] * 2 + [["report ok=True"] * 2] * 2


def test_a_collective_on_a_group_with_the_default_timeout_is_bounded(
    pool: DistributedPool,
) -> None:
    results = pool.run(checks.bounded_collective)
    for rank in (0, 2, 3):
        outcome, seconds = results[rank]
        assert outcome.startswith(
            "DistributedError: a collective (all_reduce) over 4 rank(s) did not complete "
            "within 1.5 s"
        ), outcome
        assert seconds <= checks.TIMEOUT + MARGIN, seconds


@pytest.mark.parametrize("where", ["group", "mesh dim"])
def test_a_rank_stopped_inside_verify_fails_the_others_within_the_timeout(
    pool: DistributedPool, where: str
) -> None:
    """Past arrival, every collective verify makes -- over the group, and over each mesh dim's
    group (made with torch's 30-minute default) -- is bounded: a peer waiting on the stalled rank
    raises within the timeout, and one waiting on that peer within one timeout more."""
    results = pool.run(checks.stopped_inside, where, where)
    for rank, result in enumerate(results):
        outcome = result["outcome"]
        assert outcome.startswith("DistributedError: a collective ("), (rank, outcome)
        assert "did not complete within 1.5 s" in outcome, (rank, outcome)
        assert result["again"] == "report ok=True", "the ranks stay in step"
    assert all(results[r]["seconds"] <= 2 * checks.TIMEOUT + MARGIN for r in (0, 2, 3)), results
    sizes = {r["outcome"].split(" over ")[1].split(" rank")[0] for r in results}
    assert sizes == ({"4"} if where == "group" else {"2"}), sizes


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, "InvalidValueError"), (-1.5, "InvalidValueError"), ("5", "InvalidArgumentError")],
)
def test_a_bad_timeout_is_refused_alike_before_any_collective(
    pool: DistributedPool, value: object, error: str
) -> None:
    assert pool.run(checks.bad_timeout, value) == [f"{error} after 0 collective(s)"] * 4


@pytest.mark.parametrize("value", [7, 7.5, datetime.timedelta(seconds=7)])
def test_a_timeout_in_seconds_or_as_a_timedelta_is_taken(
    pool: DistributedPool, value: object
) -> None:
    assert pool.run(checks.passes_with, value) == [True] * 4
