"""hwrng's Lightning callback against the real Lightning Trainer (DDP, 2 gloo CPU ranks).

Train 2 epochs with a checkpoint after each (Lightning's ModelCheckpoint); fresh
processes resume from the first epoch's checkpoint with ``trainer.fit(ckpt_path=...)``:
with :class:`HwrngCallback` every loss of the last epoch matches bit for bit;
with Lightning alone (``seed_everything(workers=True)``) they do not (xfail). When
one rank refuses the checkpoint's RNG state, every rank refuses before training.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import pool_fixture

pytest.importorskip("lightning", reason="the lightning extra is not installed")

import lightning_checks as checks
import trainer_data

from hwrng.testing import DistributedPool

EPOCHS, RESUME_AFTER = 2, 0  # checkpoint of epoch 0 (N = 2 steps), then M = 2 steps
STEPS = trainer_data.ITEMS // (2 * trainer_data.BATCH)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, tuple[str, list[list[float]]]]:
    runs = {}
    with DistributedPool(2, timeout=300) as pool:  # every rank's losses; draws kept aside
        for with_hwrng in (True, False):
            directory = str(tmp_path_factory.mktemp(f"lightning-{with_hwrng}") / "ckpt")
            results = pool.run(checks.train, directory, EPOCHS, with_hwrng)
            runs[with_hwrng] = (directory, [losses for losses, _ in results])
            draws[with_hwrng] = {d for _, per_rank in results for d in per_rank}
    return runs


draws: dict[bool, set[float]] = {}


fresh = pool_fixture(2, timeout=300, name="fresh")


def _resumed(
    trained: dict[bool, tuple[str, list[list[float]]]], fresh: DistributedPool, with_hwrng: bool
) -> tuple[list[list[float]], list[list[float]]]:
    directory, losses = trained[with_hwrng]
    assert all(len(per_rank) == EPOCHS * STEPS for per_rank in losses)
    assert Path(directory, f"epoch={RESUME_AFTER}.ckpt").is_file()
    resumed = fresh.run(checks.resume, directory, RESUME_AFTER, EPOCHS, with_hwrng)
    expected = [per_rank[(RESUME_AFTER + 1) * STEPS :] for per_rank in losses]
    return resumed, expected


def test_ranks_draw_their_own_dropout_and_augmentation(
    trained: dict[bool, tuple[str, list[list[float]]]],
) -> None:
    _, losses = trained[True]
    assert losses[0] != losses[1]


def test_with_hwrng_fresh_processes_resume_bit_for_bit(
    trained: dict[bool, tuple[str, list[list[float]]]], fresh: DistributedPool
) -> None:
    resumed, expected = _resumed(trained, fresh, True)
    assert resumed == expected


@pytest.mark.xfail(
    strict=True,
    reason="Lightning alone: its checkpoints hold no RNG state, so the resumed run draws "
    "other dropout masks and augmentations",
)
def test_lightning_alone_resumes_bit_for_bit(
    trained: dict[bool, tuple[str, list[list[float]]]], fresh: DistributedPool
) -> None:
    resumed, expected = _resumed(trained, fresh, False)
    assert resumed == expected


def test_when_one_rank_refuses_the_checkpoint_every_rank_refuses_before_training(
    trained: dict[bool, tuple[str, list[list[float]]]], fresh: DistributedPool
) -> None:
    directory, _ = trained[True]
    outcomes = fresh.run(checks.resume_refused_on_rank_1, directory, RESUME_AFTER, EPOCHS)
    assert outcomes[1].startswith("refused: live tracker(s) ['lightning-only-on-rank-1']"), outcomes
    assert outcomes[0].startswith("refused: rank 1 refused"), outcomes


def test_a_checkpoint_written_without_hwrng_is_refused_or_starts_new_streams(
    trained: dict[bool, tuple[str, list[list[float]]]], fresh: DistributedPool
) -> None:
    directory, _ = trained[False]
    refused = fresh.run(checks.resume_without_hwrng_entry, directory, RESUME_AFTER, EPOCHS, "error")
    for outcome, _, _ in refused:
        assert outcome.startswith(
            "refused: refusing to go on from the seed: the checkpoint holds no hwrng entry"
        ), outcome
    reseeded = fresh.run(
        checks.resume_without_hwrng_entry, directory, RESUME_AFTER, EPOCHS, "reseed"
    )
    for outcome, resumed, warned in reseeded:
        assert outcome == "trained"
        assert len(warned) == 1 and "new streams, which repeat nothing" in warned[0]
        assert resumed and not set(resumed) & draws[False], "a draw of the saved run repeated"


def test_persistent_workers_are_refused_at_a_resume(
    trained: dict[bool, tuple[str, list[list[float]]]], fresh: DistributedPool
) -> None:
    directory, _ = trained[True]
    outcomes = fresh.run(checks.resume_with_persistent_workers, directory, RESUME_AFTER, EPOCHS)
    assert all("persistent_workers=True" in o for o in outcomes), outcomes


@pytest.mark.parametrize("world", [4, 1], ids=["2 -> 4", "2 -> 1"])
def test_reseed_on_another_world_size_repeats_no_draw_of_the_saved_run(
    trained: dict[bool, tuple[str, list[list[float]]]], world: int
) -> None:
    directory, _ = trained[True]
    with DistributedPool(world, timeout=300) as pool:
        refused = pool.run(checks.resume_another_world, directory, RESUME_AFTER, EPOCHS, "error")
        assert all(o.startswith("refused: refusing to restore") for o, _, _ in refused), refused
        reseeded = pool.run(checks.resume_another_world, directory, RESUME_AFTER, EPOCHS, "reseed")
    for outcome, resumed, warned in reseeded:
        assert outcome == "trained"
        assert len(warned) == 1 and "written by 2 rank(s)" in warned[0], warned
        assert resumed and not set(resumed) & draws[True], "a draw of the saved run repeated"


def test_a_mid_epoch_resume_with_a_plain_loader_warns_that_lightning_replays_its_batches(
    trained: dict[bool, tuple[str, list[list[float]]]], fresh: DistributedPool
) -> None:
    directory, _ = trained[True]
    warned = fresh.run(checks.resume_mid_epoch, directory, 1, EPOCHS)
    assert all(any("serves the epoch's first batches again" in w for w in ws) for ws in warned)


def test_copies_and_renames_of_checkpoints_resume_after_lightning_removes_the_originals(
    fresh: DistributedPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``cp epoch=0.ckpt best.ckpt``, ``cp last.ckpt last-backup.ckpt`` and ``mv epoch=1.ckpt
    keep-1.ckpt`` as training goes on (top-k by a monitor, ``save_last``): when Lightning
    removed the original (or, renamed, removed nothing) or saved ``last.ckpt`` over, hwrng
    removed the set, and each copy was refused."""
    directory = str(tmp_path_factory.mktemp("kept") / "ckpt")
    epochs = 4
    losses = fresh.run(checks.train_keeping_copies, directory, epochs)
    assert not Path(directory, "epoch=0.ckpt").exists()  # Lightning removed the originals
    assert not Path(directory, "epoch=1.ckpt").exists()
    for name, after_epoch in (("best.ckpt", 0), ("last-backup.ckpt", 1), ("keep-1.ckpt", 1)):
        resumed = fresh.run(checks.resume_from, str(Path(directory, name)), epochs)
        expected = [per_rank[(after_epoch + 1) * STEPS :] for per_rank in losses]
        assert resumed == expected, name
