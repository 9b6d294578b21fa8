"""Claims belong to contexts, not threads (issue 17, item 8): a fork held across a ``yield``
and closed on another thread gives its claim back; ``HWRNG_CLAIM_TIMEOUT`` past what the OS
can wait (``inf``, ``1e12``) waits without limit instead of raising ``OverflowError``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import torch
from torch.distributed.tensor import Shard

import hwrng
from hwrng._claims import _timeout


def _forked_draws() -> Iterator[torch.Tensor]:
    with hwrng.fork_rng(platform="cpu"):
        yield torch.rand(2)
        yield torch.rand(2)  # pragma: no cover - closed before


def _on_thread(work: object) -> list[BaseException]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()  # type: ignore[operator]
        except BaseException as error:  # reported to the test
            errors.append(error)

    thread = threading.Thread(target=run, name="worker")
    thread.start()
    thread.join()
    return errors


def test_a_fork_closed_on_another_thread_gives_its_claim_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HWRNG_CLAIM_TIMEOUT", "5")
    torch.manual_seed(3)
    before = torch.get_rng_state()
    draws = _forked_draws()
    assert not _on_thread(lambda: next(draws)), "entered and advanced on a worker thread"
    draws.close()  # closed on this thread: the fork restores and releases
    assert torch.equal(torch.get_rng_state(), before), "the fork restored the generator"
    # Any thread may now claim the generator: nothing was left held.
    assert not _on_thread(_fork_and_draw)
    _fork_and_draw()


def _fork_and_draw() -> None:
    with hwrng.fork_rng(platform="cpu"):
        torch.rand(1)


def test_every_thread_claims_after_a_cross_thread_close(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HWRNG_CLAIM_TIMEOUT", "5")
    draws = _forked_draws()
    next(draws)  # entered on this thread
    assert not _on_thread(draws.close), "closed on a worker thread without an error"
    assert not _on_thread(_fork_and_draw)
    _fork_and_draw()


@pytest.mark.parametrize("text", ["inf", "1e12", "Infinity"])
def test_timeouts_past_the_os_limit_wait_without_limit(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv("HWRNG_CLAIM_TIMEOUT", text)
    assert _timeout() is None
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with hwrng.fork_rng(platform="cpu"):
            entered.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    entered.wait(30)
    waiter_errors: list[BaseException] = []

    def wait_for_the_holder() -> None:
        try:
            with hwrng.fork_rng(platform="cpu"):
                pass
        except BaseException as error:  # reported to the test
            waiter_errors.append(error)

    waiter = threading.Thread(target=wait_for_the_holder)
    waiter.start()
    waiter.join(0.2)  # let it reach the claim and wait on it (before: OverflowError here)
    release.set()
    holder.join()
    waiter.join()
    assert not waiter_errors


@pytest.mark.parametrize(("text", "expected"), [("0.5", 0.5), ("60", 60.0), ("1e6", 1e6)])
def test_finite_timeouts_are_kept(
    monkeypatch: pytest.MonkeyPatch, text: str, expected: float
) -> None:
    monkeypatch.setenv("HWRNG_CLAIM_TIMEOUT", text)
    assert _timeout() == expected


@pytest.mark.parametrize("text", ["0", "-1", "nan", "soon"])
def test_bad_timeouts_are_refused(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("HWRNG_CLAIM_TIMEOUT", text)
    with pytest.raises(hwrng.InvalidArgumentError, match="HWRNG_CLAIM_TIMEOUT"):
        _timeout()


def test_regions_in_two_threads_each_draw_their_own_shard(cpu: hwrng.Platform) -> None:
    """Two threads run regions for different shards of one op, many times: each thread's
    draws must be exactly what its shard's (seed, offset) gives, never the other's."""
    tracker = hwrng.OffsetTracker(cpu)
    specs = [hwrng.ShardSpec((64,), (2,), (Shard(0),), (c,)) for c in (0, 1)]
    starts = [hwrng.shard_offsets(spec)[0] for spec in specs]
    cpu.set_seed_offset(torch.default_generator, 77, 0)
    drawn: list[list[tuple[int, torch.Tensor]]] = [[], []]
    barrier = threading.Barrier(2)

    def work(which: int) -> None:
        barrier.wait()
        for _ in range(150):
            with tracker.region(specs[which]) as generator:
                _, offset = cpu.counter.peek(generator)
                time.sleep(0)  # invite a switch inside the region
                drawn[which].append((offset - starts[which], torch.rand(32, generator=generator)))

    threads = [threading.Thread(target=work, args=(w,)) for w in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    bases = sorted(base for results in drawn for base, _ in results)
    assert len(set(bases)) == 300, "every region of either thread got a range of its own"
    for which in (0, 1):
        for base, values in drawn[which]:
            oracle = torch.Generator()
            cpu.set_seed_offset(oracle, 77, base + starts[which])
            assert torch.equal(values, torch.rand(32, generator=oracle))


def test_forks_in_two_threads_keep_their_streams(cpu: hwrng.Platform) -> None:
    tracker = hwrng.RNGStatesTracker(cpu)
    tracker.add("a", 101)
    tracker.add("b", 202)
    hwrng.manual_seed(5, platform=cpu)
    default_state = torch.get_rng_state()
    drawn: dict[str, list[torch.Tensor]] = {"a": [], "b": []}
    barrier = threading.Barrier(2)

    def work(name: str) -> None:
        barrier.wait()
        for _ in range(200):
            with tracker.fork(name):
                time.sleep(0)
                drawn[name].append(torch.rand(4))

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert torch.equal(torch.get_rng_state(), default_state), "the default stream came back"
    for name, seed in (("a", 101), ("b", 202)):
        oracle = torch.Generator()
        oracle.manual_seed(seed)
        expected = torch.rand(4 * 200, generator=oracle)
        assert torch.equal(torch.cat(drawn[name]), expected), f"stream {name!r} intact"


def test_a_thread_waiting_too_long_gets_a_clear_error(
    cpu: hwrng.Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HWRNG_CLAIM_TIMEOUT", "0.2")
    tracker = hwrng.RNGStatesTracker(cpu)
    tracker.add("x", 1)
    errors: list[BaseException] = []
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with tracker.fork("x"):
            entered.set()
            release.wait(10)

    holder = threading.Thread(target=hold, name="holder")
    holder.start()
    entered.wait(10)
    try:
        with hwrng.OffsetTracker(cpu).region(hwrng.ShardSpec((4,), (1,), (Shard(0),), (0,))):
            pass  # pragma: no cover - never entered
    except hwrng.NestingError as error:
        errors.append(error)
    finally:
        release.set()
        holder.join()
    assert errors and "held by thread 'holder'" in str(errors[0])
