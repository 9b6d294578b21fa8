"""Claims belong to contexts, not threads (issue 17, item 8): a fork held across a ``yield``
and closed on another thread gives its claim back; ``HWRNG_CLAIM_TIMEOUT`` past what the OS
can wait (``inf``, ``1e12``) waits without limit instead of raising ``OverflowError``."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch

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
