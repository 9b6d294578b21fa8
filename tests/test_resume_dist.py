"""Exact resume over real gloo processes: train, checkpoint, train on; then fresh processes
load and train on; the losses match bit for bit, through DCP and through torch.save."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dist_resume_checks as checks
import pytest

from hwrng._launch import DistributedPool

EPOCHS_BEFORE, EPOCHS_AFTER = 1, 2


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[float]]]:
    directory = tmp_path_factory.mktemp("resume")
    with DistributedPool(4, timeout=180) as pool:
        losses = pool.run(checks.train_and_checkpoint, str(directory), EPOCHS_BEFORE, EPOCHS_AFTER)
    return directory, losses


@pytest.fixture(scope="module")
def fresh() -> Iterator[DistributedPool]:
    with DistributedPool(4, timeout=180) as started:
        yield started


def test_the_uninterrupted_run_is_random_where_it_should_be(
    trained: tuple[Path, list[list[float]]],
) -> None:
    _, losses = trained
    steps = EPOCHS_AFTER * checks.STEPS_PER_EPOCH
    assert len(losses) == 4 and all(len(per_rank) == steps for per_rank in losses)
    assert len({tuple(per_rank) for per_rank in losses}) == 4, "every rank its own data, dropout"


@pytest.mark.parametrize("mode", ["dcp", "torch"])
def test_fresh_processes_resume_bit_for_bit(
    trained: tuple[Path, list[list[float]]], fresh: DistributedPool, mode: str
) -> None:
    directory, expected = trained
    resumed = fresh.run(checks.resume, str(directory), mode, EPOCHS_AFTER)
    assert resumed == expected


def test_a_checkpoint_of_rank_1_is_refused_on_rank_2(
    trained: tuple[Path, list[list[float]]], fresh: DistributedPool
) -> None:
    directory, _ = trained
    message = fresh.run(checks.load_another_ranks_file, str(directory))[2]
    assert message.startswith("unchanged: refusing to restore this RNG state")
    assert "rank 1 (here 2)" in message
