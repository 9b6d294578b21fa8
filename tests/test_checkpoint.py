"""hwrng.state_dict / load_state_dict on one process: round trips, and every refusal."""

from __future__ import annotations

import copy
import io
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sealed import opened

import hwrng
from hwrng._mesh import MeshLayout
from hwrng._seeding import record_seeding
from hwrng.checkpoint._capture import document_digest as _digest


def _everything(tracker: hwrng.RNGStatesTracker) -> tuple[Any, ...]:
    """Every stream's next draws, taken without moving anything (state put back after)."""
    with hwrng.isolate_rng(platform="cpu"):
        draws = (torch.rand(4).tolist(), random.random(), float(np.random.rand()))
    states = tracker.get_states()
    plan = hwrng.current_seeding()
    return (
        draws,
        {k: v.tolist() for k, v in states.items()},
        os.environ.get("PYTHONHASHSEED"),
        None if plan is None else plan.to_dict(),
        hwrng.get_platform("cpu").counter.peek(torch.default_generator),
    )


@pytest.fixture
def tracker() -> hwrng.RNGStatesTracker:
    return hwrng.RNGStatesTracker("cpu", name="checkpoint-test")


def _seeded(tracker: hwrng.RNGStatesTracker) -> dict[str, Any]:
    hwrng.manual_seed(11, platform="cpu")
    tracker.add("model-parallel-rng", 2729)
    torch.rand(7), random.random(), np.random.rand()
    with tracker.fork():
        torch.rand(3)
    return hwrng.state_dict()


def test_round_trip_through_torch_save_is_exact(tracker: hwrng.RNGStatesTracker) -> None:
    document = _seeded(tracker)
    expected = _everything(tracker)
    buffer = io.BytesIO()
    torch.save(document, buffer)
    torch.rand(5), random.random(), np.random.rand()
    with tracker.fork():
        torch.rand(9)
    hwrng.seed_everything(3, "cpu")
    assert _everything(tracker) != expected
    buffer.seek(0)
    hwrng.load_state_dict(torch.load(buffer, weights_only=True))
    assert _everything(tracker) == expected


def test_the_document_says_what_wrote_it(tracker: hwrng.RNGStatesTracker) -> None:
    document = _seeded(tracker)
    assert document["format"] == 3
    assert document["written_by"]["backend"] == "cpu"
    assert document["written_by"]["rank"] == 0 and document["written_by"]["world_size"] == 1
    assert document["trackers"]["checkpoint-test"].keys() == {"model-parallel-rng"}
    assert document["plan"]["seed"] == 11 and document["pythonhashseed"] == "11"


def _tamper(document: dict[str, Any], redigest: bool = True, **written_by: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    changed["written_by"].update(written_by)
    if redigest:
        changed["digest"] = _digest(changed)
    return changed


def _flip_a_byte(document: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    changed["torch_cpu"][100] ^= 1
    return changed


REFUSALS = {
    "another backend": (lambda d: _tamper(d, backend="cuda"), "backend 'cuda' \\(here 'cpu'\\)"),
    "another rank": (lambda d: _tamper(d, rank=1), "rank 1 \\(here 0\\)"),
    "another world size": (lambda d: _tamper(d, world_size=8), "world size 8 \\(here 1\\)"),
    "another device count": (lambda d: _tamper(d, device_count=2), "device count 2"),
    "an unknown format": (lambda d: {**d, "format": 2}, "format 2 is not one"),
    "a changed value": (_flip_a_byte, "does not match its digest"),
    "a missing field": (lambda d: {k: v for k, v in d.items() if k != "numpy"}, "digest|'numpy'"),
    "not a mapping": (lambda d: [d], "is a mapping"),
    "an edited tracker list": (
        lambda d: {**d, "trackers": {"gone": d["trackers"]["checkpoint-test"]}},
        "digest",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_refusals_change_nothing(tracker: hwrng.RNGStatesTracker, case: str) -> None:
    document = _seeded(tracker)
    torch.rand(2)
    before = _everything(tracker)
    make, message = REFUSALS[case]
    with pytest.raises(hwrng.CheckpointError, match=message):
        hwrng.load_state_dict(make(document))
    assert _everything(tracker) == before


def test_trackers_must_match_by_name(tracker: hwrng.RNGStatesTracker) -> None:
    document = _seeded(tracker)
    renamed = {**document, "trackers": {"elsewhere": document["trackers"]["checkpoint-test"]}}
    renamed["digest"] = _digest(renamed)
    before = _everything(tracker)
    with pytest.raises(hwrng.CheckpointError, match="no live RNGStatesTracker has that name"):
        hwrng.load_state_dict(renamed)
    unsaved = {**document, "trackers": {}}
    unsaved["digest"] = _digest(unsaved)
    with pytest.raises(hwrng.CheckpointError, match=r"'checkpoint-test'.*hold named states"):
        hwrng.load_state_dict(unsaved)
    assert _everything(tracker) == before


def test_a_mesh_other_than_the_saved_one_is_refused(tracker: hwrng.RNGStatesTracker) -> None:
    document = _seeded(tracker)
    layout = {"names": ["dp", "tp"], "shape": [2, 4], "ranks": None}
    saved_on_a_mesh = _tamper(document, mesh=layout)
    hwrng.load_state_dict(saved_on_a_mesh)  # no mesh declared here: the saved one comes back
    record_seeding(hwrng.Seeding(11, (), "cpu", "manual_seed", MeshLayout(("dp",), (8,))))
    with pytest.raises(hwrng.CheckpointError, match="mesh"):
        hwrng.load_state_dict(saved_on_a_mesh)


def test_file_helpers_and_truncated_files(tracker: hwrng.RNGStatesTracker, tmp_path: Path) -> None:
    _seeded(tracker)
    path = tmp_path / "rng-rank0.pt"
    hwrng.save(path)
    expected = _everything(tracker)
    torch.rand(3)
    hwrng.load(path)
    assert _everything(tracker) == expected
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    torch.rand(3)
    before = _everything(tracker)
    with pytest.raises(hwrng.CheckpointError, match=r"rng-rank0\.pt' is truncated: it holds"):
        hwrng.load(path)
    path.write_bytes(data + b"\0")
    with pytest.raises(hwrng.CheckpointError, match="is longer than written"):
        hwrng.load(path)
    path.write_bytes(data[8:])
    with pytest.raises(hwrng.CheckpointError, match="not an RNG state sealed by this hwrng"):
        hwrng.load(path)
    with pytest.raises(hwrng.CheckpointError, match="cannot read"):
        hwrng.load(tmp_path / "missing.pt")
    assert _everything(tracker) == before


@settings(max_examples=60, deadline=None)
@given(where=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
def test_a_flipped_bit_anywhere_in_a_saved_file_is_refused_and_changes_nothing(
    tmp_path_factory: pytest.TempPathFactory, where: float, bit: int
) -> None:
    hwrng.manual_seed(5, platform="cpu")
    path = tmp_path_factory.mktemp("flip") / "rank0.pt"
    hwrng.save(path)
    data = bytearray(path.read_bytes())
    data[int(where * len(data))] ^= 1 << bit
    path.write_bytes(bytes(data))
    torch.rand(3)
    with hwrng.isolate_rng(platform="cpu"):
        before = torch.rand(4)
    with pytest.raises(hwrng.CheckpointError, match=r"rank0\.pt"):
        hwrng.load(path)
    with hwrng.isolate_rng(platform="cpu"):
        assert torch.equal(torch.rand(4), before)


def test_reseed_is_explicit_and_warned(tracker: hwrng.RNGStatesTracker) -> None:
    document = _seeded(tracker)
    grown = _tamper(document, world_size=8, rank=5)
    before = _everything(tracker)
    with pytest.raises(hwrng.CheckpointError, match="world size 8"):
        hwrng.load_state_dict(grown)
    assert _everything(tracker) == before
    saved_seed, saved_offset = document["position"]
    assert (saved_seed, saved_offset) == (11, 4)  # torch.rand(7) after the seeding
    # what the saved job drew from the start: every stream at the beginning of its seed
    hwrng.manual_seed(11, platform="cpu")
    tracker.reset()
    tracker.add("model-parallel-rng", 2729)
    from_the_start = _everything(tracker)
    torch.rand(3), random.random(), np.random.rand()
    with pytest.warns(hwrng.HwrngWarning, match="re-derived from the saved seed plan"):
        hwrng.load_state_dict(grown, on_mismatch="reseed")
    reseeded = _everything(tracker)
    plan = hwrng.current_seeding()
    assert plan is not None and plan.generation == 1 and plan.seed == 11
    # the default generator (DTensor ops draw from it) continues at the saved position ...
    with hwrng.isolate_rng(platform="cpu"):
        hwrng.get_platform("cpu").set_seed_offset(torch.default_generator, 11, saved_offset)
        continued = torch.rand(4).tolist()
    assert reseeded[0][0] == continued
    # ... while random, NumPy and the named state replay nothing the saved job drew
    assert reseeded[0][1] != from_the_start[0][1] and reseeded[0][1] != before[0][1]
    assert reseeded[0][2] != from_the_start[0][2] and reseeded[0][2] != before[0][2]
    assert reseeded[1] != from_the_start[1] and reseeded[1] != before[1]
    # the same on any process that re-derives the same generation (set up as at the start)
    torch.rand(3), random.random(), np.random.rand()
    tracker.reset()
    tracker.add("model-parallel-rng", 2729)
    with pytest.warns(hwrng.HwrngWarning):
        hwrng.load_state_dict(grown, on_mismatch="reseed")
    assert _everything(tracker)[:2] == reseeded[:2]
    with pytest.raises(hwrng.CheckpointError, match="'error' or 'reseed'"):
        hwrng.load_state_dict(document, on_mismatch="ignore")  # type: ignore[arg-type]


def test_a_second_reseed_starts_a_new_generation(tracker: hwrng.RNGStatesTracker) -> None:
    document = _seeded(tracker)
    with pytest.warns(hwrng.HwrngWarning, match="resume generation 1"):
        hwrng.load_state_dict(_tamper(document, world_size=8, rank=5), on_mismatch="reseed")
    first = _everything(tracker)
    again = hwrng.state_dict()
    assert again["plan"]["generation"] == 1
    with pytest.warns(hwrng.HwrngWarning, match="resume generation 2"):
        hwrng.load_state_dict(_tamper(again, world_size=4, rank=3), on_mismatch="reseed")
    assert _everything(tracker)[0][1:] != first[0][1:]


def test_rng_state_is_a_shared_key_and_one_of_its_own(tracker: hwrng.RNGStatesTracker) -> None:
    _seeded(tracker)
    state = hwrng.RNGState()
    saved = state.state_dict()
    assert set(saved) == {"job", "rank_0"} and all(isinstance(v, bytes) for v in saved.values())
    job = opened(saved["job"])
    assert job["format"] == 3 and job["world_size"] == 1 and job["plan"]["seed"] == 11
    own = opened(saved["rank_0"])
    assert own["nonce"] == job["nonce"] and own["state"]["written_by"]["rank"] == 0
    expected = _everything(tracker)
    torch.rand(4)
    fresh = hwrng.RNGState()
    template = fresh.state_dict()  # what DCP loads into
    assert set(template) == {"job", "rank_0"}
    fresh.load_state_dict(saved)
    assert _everything(tracker) == expected
    torch.rand(4)
    buffer = io.BytesIO()
    torch.save(saved, buffer)  # what DCP does: the value comes back as a new object
    state.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    assert _everything(tracker) == expected


def test_an_entry_dcp_did_not_fill_is_refused(tracker: hwrng.RNGStatesTracker) -> None:
    _seeded(tracker)
    state = hwrng.RNGState(on_mismatch="reseed")
    template = state.state_dict()
    torch.rand(4)
    before = _everything(tracker)
    for unfilled in (template, {"job": None}, {"job": template["job"]}):
        with pytest.raises(hwrng.CheckpointError, match="DCP did not fill"):
            state.load_state_dict(unfilled)
    with pytest.raises(hwrng.CheckpointError, match="hwrng entry is truncated"):
        state.load_state_dict({"job": template["job"][:100]})
    with pytest.raises(hwrng.CheckpointError, match="not the bytes"):
        state.load_state_dict({"job": {"rank_0": template["job"]}})
    with pytest.raises(hwrng.CheckpointError, match="layout 1"):
        state.load_state_dict({"ranks": template["rank_0"]})
    assert _everything(tracker) == before


def test_a_checkpoint_without_an_hwrng_entry_is_refused_or_starts_new_streams(
    tracker: hwrng.RNGStatesTracker,
) -> None:
    _seeded(tracker)
    hwrng.manual_seed(11, platform="cpu")  # a fresh process seeds, then loads
    tracker.reset()
    tracker.add("model-parallel-rng", 2729)
    from_the_start = _everything(tracker)
    with pytest.raises(hwrng.CheckpointError, match=r"holds no hwrng entry.*would restart"):
        hwrng.RNGState().load_state_dict({"model": b"weights only"})
    assert _everything(tracker) == from_the_start
    state = hwrng.RNGState(on_mismatch="reseed")
    with pytest.warns(hwrng.HwrngWarning, match="new streams, which repeat nothing"):
        state.load_state_dict({"model": b"weights only"})
    fresh = _everything(tracker)
    plan = hwrng.current_seeding()
    assert plan is not None and plan.generation == 1
    # a seed of its own, so that no stream, torch's included, repeats the saved job's draws
    assert plan.seed != 11
    for now, then in zip(fresh[0], from_the_start[0], strict=True):
        assert now != then
    assert fresh[1] != from_the_start[1]


def test_an_entry_of_another_save_is_refused(tracker: hwrng.RNGStatesTracker) -> None:
    _seeded(tracker)
    first = hwrng.RNGState().state_dict()
    second = hwrng.RNGState().state_dict()
    before = _everything(tracker)
    with pytest.raises(hwrng.CheckpointError, match="not written by the save"):
        hwrng.RNGState().load_state_dict({"job": first["job"], "rank_0": second["rank_0"]})
    assert _everything(tracker) == before


def _crafted(document: dict[str, Any], change: Any) -> dict[str, Any]:
    """``document`` with one value changed and the digest recomputed: digest-valid, impossible."""
    crafted = copy.deepcopy(document)
    change(crafted)
    crafted["digest"] = _digest(crafted)
    return crafted


def _set(*path: Any) -> Any:
    *keys, last, value = path

    def change(document: dict[str, Any]) -> None:
        target = document
        for key in keys:
            target = target[key]
        target[last] = value

    return change


CRAFTED = {
    "remembered offset 6": (_set("host_reading", "memo", 6), "multiple of 4, got 6"),
    "remembered offset -4": (_set("host_reading", "memo", -4), "must be >= 0, got -4"),
    "remembered offset 2**64": (_set("host_reading", "memo", 2**64), "must be < 2\\*\\*63"),
    "anchor offset 6": (_set("host_reading", "anchors", [[11, 6]]), "multiple of 4, got 6"),
    "anchor seed 2**65": (_set("host_reading", "anchors", [[2**65, 0]]), "< 2\\*\\*64"),
    "plan seed 2**65": (_set("plan", "seed", 2**65), "< 2\\*\\*64"),
    "position 6": (_set("position", [11, 6]), "multiple of 4, got 6"),
    "position seed 2**65": (_set("position", [2**65, 0]), "< 2\\*\\*64"),
    "a short state": (_set("torch_cpu", torch.zeros(16, dtype=torch.uint8)), "torch_cpu"),
    "a state of another dtype": (
        lambda d: d.update(torch_cpu=d["torch_cpu"].to(torch.int32)),
        "torch_cpu",
    ),
    "python words cut short": (
        lambda d: d["python"].update(words=d["python"]["words"][:10]),
        "'python' is unusable",
    ),
    "a negative plan coordinate": (
        lambda d: d["plan"]["dims"].append(
            {"name": "tp", "coordinate": -1, "weight": 1, "size": 2, "members": None}
        ),
        "negative coordinate",
    ),
    "PYTHONHASHSEED 'x'": (_set("pythonhashseed", "x"), "PYTHONHASHSEED"),
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_digest_valid_documents_with_impossible_values_are_refused(
    tracker: hwrng.RNGStatesTracker, case: str
) -> None:
    document = _seeded(tracker)
    torch.rand(2)
    before = _everything(tracker)
    change, message = CRAFTED[case]
    with pytest.raises(hwrng.CheckpointError, match=message):
        hwrng.load_state_dict(_crafted(document, change))
    assert _everything(tracker) == before


@pytest.mark.parametrize("block", ["tracker.fork", "fork_rng", "isolate_rng"])
def test_no_snapshot_inside_a_fork(tracker: hwrng.RNGStatesTracker, block: str) -> None:
    _seeded(tracker)
    forks = {
        "tracker.fork": tracker.fork,
        "fork_rng": lambda: hwrng.fork_rng(platform="cpu"),
        "isolate_rng": lambda: hwrng.isolate_rng(platform="cpu"),
    }
    with forks[block](), pytest.raises(hwrng.CheckpointError, match="outside the block"):
        hwrng.state_dict()
    with forks[block](), pytest.raises(hwrng.CheckpointError, match="outside the block"):
        hwrng.RNGState().state_dict()
    hwrng.state_dict()  # after the block: fine


def test_a_failed_save_raises_and_keeps_the_previous_file(
    tracker: hwrng.RNGStatesTracker, tmp_path: Path
) -> None:
    _seeded(tracker)
    with pytest.raises(hwrng.CheckpointError, match="missing") as missing:
        hwrng.save(tmp_path / "missing" / "rng.pt")
    assert isinstance(missing.value.__cause__, OSError)
    (tmp_path / "a-directory").mkdir()
    with pytest.raises(hwrng.CheckpointError, match=r"a-directory.*is a directory") as directory:
        hwrng.save(tmp_path / "a-directory")  # refused before writing (tests/test_save_paths.py)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory"]  # no temporary left
    del missing, directory  # their tracebacks hold this frame, and so the tracker


_LIMITED_SAVE = """
import resource, signal, sys
import hwrng
hwrng.manual_seed(11, platform="cpu")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    hwrng.save(sys.argv[1])
except hwrng.CheckpointError as error:
    print("refused:", error, "| cause:", type(error.__cause__).__name__)
else:
    print("saved")
"""


def test_a_save_cut_short_by_a_file_size_limit_keeps_the_previous_file(
    tracker: hwrng.RNGStatesTracker, tmp_path: Path
) -> None:
    import subprocess
    import sys

    _seeded(tracker)
    path = tmp_path / "rng-rank0.pt"
    hwrng.save(path)
    good = path.read_bytes()
    assert len(good) > 4096
    expected = _everything(tracker)
    result = subprocess.run(
        [sys.executable, "-c", _LIMITED_SAVE, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused: cannot save the RNG state to"), result.stdout
    assert str(path) in result.stdout and "cause: OSError" in result.stdout
    assert path.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    torch.rand(3)
    hwrng.load(path)
    assert _everything(tracker) == expected


def test_reseed_mode_still_restores_exactly_when_nothing_differs() -> None:
    from hwrng._seeding import record_seeding

    torch.manual_seed(3)  # seeded without hwrng: no plan, so nothing to re-derive from
    record_seeding(None)
    torch.rand(2)
    saved = hwrng.RNGState(on_mismatch="reseed").state_dict()
    expected = torch.rand(4)
    state = hwrng.RNGState(on_mismatch="reseed")
    state.state_dict()
    state.load_state_dict(copy.deepcopy(saved))
    assert torch.equal(torch.rand(4), expected)
