"""A save never costs the last good checkpoint: one rank killed at every file event of a save.

The kill matrix (``crash_harness``): on 2 gloo ranks, every file event of each
rank during a second save to the same place is a point where that rank dies
(``os._exit``); a fresh job then resumes as a user would. Every point must
resume exactly what the trainer's checkpoint holds, or be refused loudly:
0 SILENT, 0 LOST, 0 hangs. In CI, on 4 ranks and for the longer paths, a
sample of the points runs (said in the table); ``HWRNG_FULL_MATRIX=1`` runs
every point. The table of docs/checkpoint.md is asserted here. The trainers'
paths are in tests/integrations/test_crash_trainers.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import crash_jobs as jobs
import pytest
from crash_harness import Point as Cut
from crash_harness import SavePath, Zygote, classify, run_matrix, zygote_for

DOCS = Path(__file__).resolve().parents[1] / "docs" / "checkpoint.md"
#: Every point of every path, where asked (as the table's full-run rows were made).
FULL = os.environ.get("HWRNG_FULL_MATRIX") == "1"
SAMPLE_ON_4 = None if FULL else 8
SAMPLE = None if FULL else 8  # for a path of more points than its rows need on 2 ranks


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    with zygote_for("crash_jobs") as started:
        yield started


def _documented_rows() -> set[str]:
    return {line for line in DOCS.read_text().splitlines() if line.startswith("| ")}


@pytest.mark.parametrize(
    ("path", "world", "sample"),
    [
        (jobs.BY_HAND, 2, None),
        (jobs.DCP_NEW_DIR, 2, None),
        (jobs.BY_HAND, 4, SAMPLE_ON_4),
        (jobs.DCP_NEW_DIR, 4, SAMPLE_ON_4),
        (jobs.DCP_SAME_DIR, 2, None),
        (jobs.PER_RANK, 2, None),
        (jobs.PER_RANK, 4, None if FULL else 4),
        (jobs.OVERLAP, 2, SAMPLE),
        (jobs.DCP_ASYNC, 2, None),
    ],
    ids=[
        "by hand, 2",
        "DCP new dirs, 2",
        "by hand, 4",
        "DCP new dirs, 4",
        "DCP saved over, 2",
        "hwrng.save per rank, 2",
        "hwrng.save per rank, 4",
        "two runs overlapping, 2",
        "DCP async_save, 2",
    ],
)
def test_every_kill_point_resumes_exactly_or_is_refused_loudly(
    zygote: Zygote, tmp_path: Path, path: SavePath, world: int, sample: int | None
) -> None:
    matrix = run_matrix(zygote, path, str(tmp_path), world=world, sample=sample)
    counts = matrix.counts()
    assert counts["SILENT"] == counts["LOST"] == counts["MUTE"] == counts["HANG"] == 0, (
        matrix.outcomes,
        matrix.notes,
    )
    if path is jobs.PER_RANK:  # one file per rank, saved over: a mix is refused, never loaded
        assert counts["EXACT"] + counts["LOUD"] == len(matrix.outcomes)
    elif path is not jobs.DCP_SAME_DIR:  # DCP overwrites its own files: refused, never resumed
        assert counts["EXACT"] == len(matrix.outcomes)
    assert matrix.row() in _documented_rows(), matrix.row()


def test_a_full_disk_at_any_file_event_leaves_the_previous_checkpoint_whole(
    zygote: Zygote, tmp_path: Path
) -> None:
    """The same points, where the write fails (``ENOSPC``) instead of the rank dying."""
    matrix = run_matrix(zygote, jobs.BY_HAND, str(tmp_path), world=2, kill=False)
    assert set(matrix.outcomes.values()) == {"EXACT"}, (matrix.outcomes, matrix.notes)


@pytest.mark.parametrize(
    ("rank", "at"),
    [(0, "trainer.pt.tmp"), (1, "rank-1.pt")],
    ids=["rank 0 dies before the trainer's file", "rank 1 dies before its file"],
)
def test_a_second_save_cut_short_keeps_the_first_even_without_commit(
    zygote: Zygote, tmp_path: Path, rank: int, at: str
) -> None:
    """The issue's case: rank files of a second save to the same path written, then rank 0
    dies before its own file: the first checkpoint, intact, used to be refused."""
    path = SavePath(
        "uncommitted", jobs.by_hand_save_uncommitted, jobs.by_hand_resume, jobs.by_hand_present
    )
    reference_root = str(tmp_path / "reference")
    Path(reference_root).mkdir()
    reference = zygote.run(path.save, (reference_root,), world=2, point=Cut(reference_root))
    values = reference.values()
    assert values is not None, reference.ranks
    root = str(tmp_path / "cut")
    Path(root).mkdir()
    zygote.run(path.save, (root,), world=2, point=Cut(root, rank, at=at))
    assert jobs.by_hand_present(root) == 1
    resumed = zygote.run(path.resume, (root,), world=2, point=Cut(root))
    outcome = classify(path, 1, resumed, {k: [v[k] for v in values] for k in (1, 2)})
    assert outcome == "EXACT", resumed.errors()


def test_the_documented_file_events_are_those_of_a_save(zygote: Zygote, tmp_path: Path) -> None:
    """docs/checkpoint.md lists the file events of a save in order: they are these."""
    matrix = run_matrix(zygote, jobs.BY_HAND, str(tmp_path), world=2, sample=2)
    text = DOCS.read_text()
    nonces: list[str] = []  # in the order rank 0 first names them: this save's, then older
    for _, name in matrix.events[0]:
        for nonce in re.findall("[0-9a-f]{16}", name):
            nonces += [] if nonce in nonces else [nonce]
    labels = dict(zip(nonces, ["<nonce>", "<earlier>", "<earliest>"], strict=True))
    for rank, events in enumerate(matrix.events):
        for kind, name in events:
            line = f"{kind} {re.sub('[0-9a-f]{16}', lambda m: labels[m.group()], name)}"
            assert f"rank {rank}: {line}" in text or f"every rank: {line}" in text, line
