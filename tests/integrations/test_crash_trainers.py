"""The kill matrix for the trainers' save paths (see tests/crash_harness.py).

On 2 gloo ranks every file event of each rank during a trainer's second save
to the same place is a point where that rank dies; a fresh job then resumes
as the trainer's users do. Required: 0 SILENT, 0 LOST, 0 hangs; the counts
are the table of docs/checkpoint.md. On 4 ranks a sample of Lightning's
points runs. Also the issue's case: rank 0's write of ``last.ckpt`` fails (a
full disk) after every rank wrote its RNG file: ``last.ckpt`` still resumes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("lightning", reason="the lightning extra is not installed")
pytest.importorskip("accelerate", reason="the accelerate extra is not installed")
pytest.importorskip("torchtitan", reason="the torchtitan extra is not installed")

import crash_trainer_jobs as jobs
from crash_harness import Point, SavePath, Zygote, classify, run_matrix, zygote_for

DOCS = Path(__file__).resolve().parents[2] / "docs" / "checkpoint.md"
SAMPLE_ON_4 = 8


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    with zygote_for("crash_trainer_jobs") as started:
        yield started


@pytest.mark.parametrize(
    ("path", "world", "sample"),
    [
        (jobs.LIGHTNING, 2, None),
        (jobs.FABRIC, 2, None),
        (jobs.ACCELERATE, 2, None),
        (jobs.TORCHTITAN, 2, None),
        (jobs.LIGHTNING, 4, SAMPLE_ON_4),
    ],
    ids=["Lightning, 2", "Fabric, 2", "accelerate, 2", "torchtitan, 2", "Lightning, 4"],
)
def test_every_kill_point_resumes_exactly(
    zygote: Zygote, tmp_path: Path, path: SavePath, world: int, sample: int | None
) -> None:
    matrix = run_matrix(zygote, path, str(tmp_path), world=world, sample=sample, timeout=180)
    assert set(matrix.outcomes.values()) == {"EXACT"}, (matrix.outcomes, matrix.notes)
    documented = {line for line in DOCS.read_text().splitlines() if line.startswith("| ")}
    assert matrix.row() in documented, matrix.row()


def test_a_full_disk_at_lightnings_write_of_last_ckpt_keeps_the_last_good_checkpoint(
    zygote: Zygote, tmp_path: Path
) -> None:
    """The issue's first case: every rank has written its RNG file of the second save when rank
    0's write of ``last.ckpt`` fails; ``last.ckpt`` is the first save's, and it resumes."""
    reference_root = str(tmp_path / "reference")
    Path(reference_root).mkdir()
    reference = zygote.run(jobs.lightning_save, (reference_root,), world=2, point=Point("/"))
    values = reference.values()
    assert values is not None, reference.ranks
    root = str(tmp_path / "full")
    Path(root).mkdir()
    cut = Point(root, 0, kill=False, at="rename last.ckpt")
    failed = zygote.run(jobs.lightning_save, (root,), world=2, point=cut, timeout=180)
    assert failed.values() is None and jobs.lightning_present(root) == 1, failed.ranks
    resumed = zygote.run(jobs.lightning_resume, (root,), world=2, point=Point(root), timeout=180)
    reference_draws = {k: [v[k] for v in values] for k in (1, 2)}
    assert classify(jobs.LIGHTNING, 1, resumed, reference_draws) == "EXACT", resumed.errors()
