"""hwrng.verify never waits forever: 4 real gloo ranks, one of them absent or at odds.

verify meets its peers through the job's rendezvous store before any collective,
within ``timeout`` (by default the group's own): the ranks that arrived raise
``DistributedError`` naming the rank that did not (asleep, or stopped with its
sockets open), a rank alone with ``group=`` gets a verdict naming the mismatch
-- not a transport timeout -- and a rank with a wrong argument fails its peers
at once. The store keeps a bounded number of verify's keys.
Each test is bounded by the pool's own timeout, so a regression fails instead
of hanging. The timeouts a test waits for are 1.5 s or 4 s; where the ranks must
not wait for the timeout, it is 30 s, and a wait of that length is the failure
the test looks for: each test takes seconds.
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


@pytest.mark.parametrize(
    ("slow_watcher", "together_with", "rounds"),
    [(False, "rank 0", 1), (True, "rank 0", 1), (False, "every rank", 12)],
    ids=["together", "slow watcher", "a new group of every rank"],
)
def test_a_rank_alone_with_group_gets_a_verdict_naming_the_mismatch(
    pool: DistributedPool, slow_watcher: bool, together_with: str, rounds: int
) -> None:
    """Rank 1 passes group= (ranks 0 and 1, or a new group of every rank: the default group's
    ranks, another process group), the others not: every rank gets the mismatch verdict, found
    as the ranks wait -- before the timeout could fire (a wait of the old length, the timeout
    and then a transport's failure, takes at least that long). With a group of every rank, any
    rank can find it, and several often do at once (11 of 40 rounds gave the ranks two sets of
    words before both calls were decided in one order): each of 12 rounds must give every rank
    the same words."""
    results = pool.run(checks.mixed_groups, slow_watcher, together_with, rounds)
    rule = "every rank of a group must call verify with the same group=, in the same order"
    if together_with == "rank 0":  # only ranks 0 and 1 hold both groups: one of them finds it
        sizes = (4, 2, 4, 4)
        allowed = {
            "setup [0, 1]: the ranks' arguments differ: rank 0 called hwrng.verify over all 4 "
            f"ranks while rank 1 called it over ranks [0, 1]: {rule}"
        }
    else:  # every rank holds both: rank 1 and whichever of the others finds it first
        sizes = (4, 4, 4, 4)
        world = "all 4 ranks (the default process group)"
        group = f"all 4 ranks (process group {results[1]['name']!r})"
        allowed = {
            f"setup [0, 1]: the ranks' arguments differ: rank 0 called hwrng.verify over {world} "
            f"while rank 1 called it over {group}: {rule}",
            *(
                f"setup [1, {other}]: the ranks' arguments differ: rank 1 called hwrng.verify over "
                f"{group} while rank {other} called it over {world}: {rule}"
                for other in (2, 3)
            ),
        }
    for round_ in range(rounds):
        verdicts = {result["outcomes"][round_].partition(": ")[2] for result in results}
        assert len(verdicts) == 1 and verdicts <= allowed, (round_, verdicts)
        for rank, result in enumerate(results):
            outcome, seconds = result["outcomes"][round_], result["seconds"][round_]
            assert outcome.startswith(f"report over {sizes[rank]}: "), (rank, outcome)
            assert seconds < checks.MIXED_TIMEOUT, (rank, seconds)
    assert all(r["again"] == ["report ok=True"] * rounds for r in results), "the ranks stay in step"


@pytest.mark.parametrize(
    ("argument", "value", "prefix"),
    [
        ("streams", "torch.cpu", "InvalidArgumentError: streams must be a list of names, not "),
        ("sharded_dims", ["tp"], "MeshError: sharded_dims name dims of a mesh: pass the mesh too"),
        ("platform", "no-such-backend", "BackendNotFoundError: no hwrng backend named "),
        ("timeout", 0, "InvalidValueError: timeout must be a positive, finite duration, got 0"),
        ("mesh", "dp", "MeshError: mesh must be a torch DeviceMesh, got str"),
    ],
    ids=["streams", "sharded_dims", "platform", "timeout", "mesh"],
)
def test_a_rank_with_a_wrong_argument_fails_its_peers_at_once(
    pool: DistributedPool, argument: str, value: object, prefix: str
) -> None:
    """Only rank 1's argument is wrong: it raises its error, and ranks 0, 2 and 3 each get the
    same failing report naming it at once -- before their timeout, which is what they waited
    for when rank 1 raised without arriving."""
    results = pool.run(checks.wrong_argument, argument, value)
    raised = results[1]["outcome"]
    assert raised.startswith(prefix), raised
    for rank in (0, 2, 3):
        outcome, seconds = results[rank]["outcome"], results[rank]["seconds"]
        assert outcome == f"report over 4: setup [1]: setup failed on rank 1: {raised}", outcome
        assert seconds < checks.MIXED_TIMEOUT, (rank, seconds)
    assert [r["again"] for r in results] == ["report ok=True"] * 4, "the ranks stay in step"


@pytest.mark.parametrize("kind", ["default group", "a new group"])
def test_without_timeout_verify_waits_the_groups_own_timeout(
    pool: DistributedPool, kind: str
) -> None:
    """Rank 1 raised before verify; the others call it with no timeout= over a group made with
    a 4 s timeout: they name rank 1 within it, not after verify's 5 minutes."""
    results = pool.run(checks.absent_before_default_timeout, kind)
    for rank in (0, 2, 3):
        outcome, seconds = results[rank]["outcome"], results[rank]["seconds"]
        assert outcome.startswith(
            "DistributedError: hwrng.verify over all 4 ranks: not every rank arrived within "
            f"timeout={checks.PG_TIMEOUT:g} s; did not arrive: rank 1"
        ), outcome
        assert seconds <= checks.PG_TIMEOUT + MARGIN, seconds
    assert [r["again"] for r in results] == ["report ok=True"] * 4, "the ranks stay in step"


def test_the_default_timeout_is_the_groups_own_at_most_five_minutes(
    pool: DistributedPool,
) -> None:
    assert pool.run(checks.default_timeouts) == [{"7": 7.0, "3600": 300.0}] * 4


def test_verify_leaves_a_bounded_number_of_keys_in_the_store(pool: DistributedPool) -> None:
    """Over 1,000 calls of every kind (a mismatch, refused on one rank, over a pair, passing),
    the rendezvous store holds as many keys at the end as after the first round: a call's keys
    are removed once a later call over its group has every rank in."""
    results = pool.run(checks.store_keys, 3, 656)
    assert results[0]["made"] >= 1000, results[0]["made"]
    for result in results:
        assert result["last"] == result["first"], result
    refused = "InvalidArgumentError: streams must be a list of names, not 'torch.cpu'"
    mismatch = (
        "setup [0, 1]: the ranks' arguments differ: rank 0 called hwrng.verify over all 4 ranks "
        "while rank 1 called it over ranks [0, 1]: every rank of a group must call verify with "
        "the same group=, in the same order"
    )
    ok = "report ok=True"
    assert results[0]["outcomes"] == [
        f"report over 4: {mismatch}",
        f"report over 4: setup [1]: setup failed on rank 1: {refused}",
        ok,
        ok,
    ] * 4 + [ok]
    assert results[1]["outcomes"] == [f"report over 2: {mismatch}", refused, ok, ok] * 4 + [ok]


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
    [
        (0, "InvalidValueError"),
        (-1.5, "InvalidValueError"),
        ("5", "InvalidArgumentError"),
        (1e9 + 1, "InvalidValueError"),
        (8e9, "InvalidValueError"),
        (1e10, "InvalidValueError"),
        (datetime.timedelta.max, "InvalidValueError"),
        (10**400, "InvalidValueError"),
    ],
    ids=["0", "-1.5", "'5'", "1e9+1", "8e9", "1e10", "timedelta.max", "10**400"],
)
def test_a_bad_timeout_is_refused_alike_before_any_collective(
    pool: DistributedPool, value: object, error: str
) -> None:
    """Beyond 1e9 s too: gloo's clock arithmetic wraps from about 7.4e9 s -- a reduction with every
    rank present then never completes (8e9), or fails at once and leaves the process group
    unusable (1e10) -- and a timedelta.max overflowed in torch's conversion."""
    assert (
        pool.run(checks.bad_timeout, value)
        == [f"{error} after 0 collective(s); then all_reduce gives 4"] * 4
    )


@pytest.mark.parametrize("value", [7, 7.5, datetime.timedelta(seconds=7), 1e9])
def test_a_timeout_in_seconds_or_as_a_timedelta_is_taken(
    pool: DistributedPool, value: object
) -> None:
    assert pool.run(checks.passes_with, value) == [True] * 4
