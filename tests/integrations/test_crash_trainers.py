"""The kill matrix for the trainers' save paths (see tests/crash_harness.py).

On 2 gloo ranks every file event of each rank during a trainer's second save
to the same place is a point where that rank dies; a fresh job then resumes
as the trainer's users do. Required: 0 SILENT, 0 LOST, 0 hangs; the counts
are the table of docs/checkpoint.md. In CI a sample of the points runs on 4
ranks and for the longer paths (``HWRNG_FULL_MATRIX=1``: every point). Also
the issues' cases: rank 0's write of ``last.ckpt`` fails (a full disk) after
every rank wrote its RNG file, with and without ``AsyncCheckpointIO``:
``last.ckpt`` still resumes; Fabric saving to a new path each time keeps
every checkpoint loadable; Lightning through ``memory://`` resumes from
another working directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("lightning", reason="the lightning extra is not installed")
pytest.importorskip("accelerate", reason="the accelerate extra is not installed")
pytest.importorskip("torchtitan", reason="the torchtitan extra is not installed")

import crash_trainer_jobs as jobs
from crash_harness import Point, SavePath, Zygote, classify, run_matrix, zygote_for

DOCS = Path(__file__).resolve().parents[2] / "docs" / "checkpoint.md"
FULL = os.environ.get("HWRNG_FULL_MATRIX") == "1"
SAMPLE_ON_4 = None if FULL else 8
SAMPLE = None if FULL else 8  # a path of many points, on 2 ranks


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
        (jobs.LIGHTNING_ASYNC, 2, SAMPLE),
        (jobs.LIGHTNING_URL, 2, SAMPLE),
        (jobs.LIGHTNING_COPY, 2, None),
        (jobs.FABRIC_PATHS, 2, None),
        (jobs.TORCHTITAN_ASYNC, 2, None),
    ],
    ids=[
        "Lightning, 2",
        "Fabric, 2",
        "accelerate, 2",
        "torchtitan, 2",
        "Lightning, 4",
        "Lightning AsyncCheckpointIO, 2",
        "Lightning fsspec URL, 2",
        "Lightning cp -rL copy, 2",
        "Fabric new paths, 2",
        "torchtitan async, 2",
    ],
)
def test_every_kill_point_resumes_exactly(
    zygote: Zygote, tmp_path: Path, path: SavePath, world: int, sample: int | None
) -> None:
    matrix = run_matrix(zygote, path, str(tmp_path), world=world, sample=sample, timeout=180)
    allowed = {"EXACT"}
    if path is jobs.LIGHTNING_COPY:  # Lightning re-links last.ckpt after removing its target
        allowed.add("LOUD")
    assert set(matrix.outcomes.values()) <= allowed, (matrix.outcomes, matrix.notes)
    if path is jobs.LIGHTNING_COPY:
        assert all(
            "Checkpoint file not found" in matrix.notes[point] and "present=None" in note
            for point, note in matrix.notes.items()
            if matrix.outcomes[point] == "LOUD"
        ), matrix.notes
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


@pytest.mark.parametrize("how", ["full disk", "rank 0 killed"])
def test_an_asynchronous_write_of_last_ckpt_that_fails_keeps_the_last_good_checkpoint(
    zygote: Zygote, tmp_path: Path, how: str
) -> None:
    """The issue's case: with ``AsyncCheckpointIO``, ``save_checkpoint`` returns once the write
    is queued; hwrng removed the previous set then, and the write failed (or rank 0 died): the
    intact previous ``last.ckpt`` named files that were gone (2 of 2 lost)."""
    reference_root = str(tmp_path / "reference")
    Path(reference_root).mkdir()
    reference = zygote.run(
        jobs.lightning_async_save, (reference_root,), world=2, point=Point("/"), timeout=180
    )
    values = reference.values()
    assert values is not None, reference.ranks
    root = str(tmp_path / "cut")
    Path(root).mkdir()
    cut = Point(root, 0, kill=how == "rank 0 killed", at="rename last.ckpt")
    failed = zygote.run(jobs.lightning_async_save, (root,), world=2, point=cut, timeout=180)
    assert failed.values() is None and jobs.lightning_present(root) == 1, failed.ranks
    resumed = zygote.run(
        jobs.lightning_async_resume, (root,), world=2, point=Point(root), timeout=180
    )
    reference_draws = {k: [v[k] for v in values] for k in values[0]}
    outcome = classify(jobs.LIGHTNING_ASYNC, 1, resumed, reference_draws)
    assert outcome == "EXACT", resumed.errors()


def test_fabric_saving_to_a_new_path_each_time_keeps_every_checkpoint_loadable(
    zygote: Zygote, tmp_path: Path
) -> None:
    """The issue's case: one ``fabric_rng_state``, ``save_fabric`` to ``step-<k>.ckpt``:
    ``save_fabric`` ignored the path, and the earlier checkpoints were refused."""
    root = str(tmp_path / "steps")
    Path(root).mkdir()
    saved = zygote.run(jobs.fabric_paths_save, (root,), world=2, point=Point("/"), timeout=180)
    values = saved.values()
    assert values is not None, saved.ranks
    for step in (1, 2):
        resumed = zygote.run(
            jobs.fabric_path_resume, (root, step), world=2, point=Point(root), timeout=180
        )
        assert resumed.values() == [v[step] for v in values], (step, resumed.errors())
    assert sorted(os.listdir(root)) == [  # each checkpoint's files beside it
        f"step-{k}.ckpt{suffix}" for k in (1, 2, 3) for suffix in ("", ".hwrng")
    ]


def test_lightning_through_memory_urls_resumes_from_another_working_directory(
    zygote: Zygote, tmp_path: Path
) -> None:
    """fsspec's ``memory://`` (one process: memory is per process): the rank files go there,
    not into a local folder named after the URL in the working directory."""
    result = zygote.run(
        jobs.lightning_memory_round_trip, (str(tmp_path),), world=1, point=Point("/"), timeout=180
    )
    values = result.values()
    assert values is not None, result.ranks
    ((resumed, expected, local_files),) = values
    assert resumed == expected and local_files == [], values


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "AsyncCheckpointIO"])
def test_lightning_keeps_the_sets_of_the_checkpoints_it_keeps_and_no_more(
    zygote: Zygote, tmp_path: Path, asynchronous: bool
) -> None:
    """The retention rule after 3 epochs (``save_top_k=1``, ``save_last=True``): the top-k file
    Lightning removed took its folder along; each kept checkpoint's folder holds in sight the
    set it names (and, asynchronously, the one before it: the last write landed after the last
    commit), and ``last.ckpt``'s the set its last commit retired (removed by the next)."""
    save = jobs.lightning_async_save if asynchronous else jobs.lightning_save
    result = zygote.run(save, (str(tmp_path),), world=2, point=Point("/"), timeout=180)
    assert result.values() is not None, result.ranks
    names = sorted(p.name for p in tmp_path.iterdir())
    kept = ["epoch=2-step=6.ckpt", "epoch=2-step=6.ckpt.hwrng", "last.ckpt", "last.ckpt.hwrng"]
    assert names == kept, names
    folders = {
        name: [p.name for p in (tmp_path / name).iterdir()] for name in names if "hwrng" in name
    }
    in_sight = {name: sum(".retired-" not in f for f in found) for name, found in folders.items()}
    retired = {name: sum(".retired-" in f for f in found) for name, found in folders.items()}
    assert in_sight == {"epoch=2-step=6.ckpt.hwrng": 1, "last.ckpt.hwrng": 2 if asynchronous else 1}
    assert retired == {"epoch=2-step=6.ckpt.hwrng": 0, "last.ckpt.hwrng": 1}
