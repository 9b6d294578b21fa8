"""``hwrng check`` end to end in a subprocess: the report, its verdicts, its exit status."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_distribution

from hwrng._cli import main

BROKEN_COUNTER_BACKEND = """
from typing import ClassVar

import hwrng
from hwrng._host import HOST_COUNTER
from hwrng.backends.cpu import CPUPlatform


class IgnoresOffsets(hwrng.CounterView):
    '''A counter that cannot position a generator: every offset lands on offset 0.'''

    def read(self, generator):
        return HOST_COUNTER.read(generator)

    def write(self, generator, seed, offset):
        HOST_COUNTER.write(generator, seed, 0)


class BrokenCPU(CPUPlatform):
    name: ClassVar[str] = "brokencpu"
    priority: ClassVar[int] = -50

    @property
    def device_type(self):
        return "cpu"

    @property
    def counter(self):
        return IgnoresOffsets()


@hwrng.hookimpl
def hwrng_platforms():
    return [BrokenCPU()]
"""


CRASHING_BACKEND = """import os
from typing import ClassVar

import hwrng
from hwrng.backends.cpu import CPUPlatform


class CrashingCPU(CPUPlatform):
    # the CPU, except that rank 1 cannot read its generator's counter
    name: ClassVar[str] = "crashcpu"
    priority: ClassVar[int] = -50

    @property
    def device_type(self):
        return "cpu"

    @property
    def counter(self):
        if os.environ.get("RANK") == "1":
            raise RuntimeError("boom on rank 1")
        return super().counter


@hwrng.hookimpl
def hwrng_platforms():
    return [CrashingCPU()]
"""


STALLING_BACKEND = """import os
import time
from typing import ClassVar

import hwrng
from hwrng.backends.cpu import CPUPlatform


class StallingCPU(CPUPlatform):
    # the CPU, except that rank 1 stalls in the named-state fork just before hwrng.verify
    name: ClassVar[str] = "stallcpu"
    priority: ClassVar[int] = -50

    @property
    def device_type(self):
        return "cpu"

    def swap_in(self, generator, state):
        if os.environ.get("RANK") == "1":
            time.sleep(6)
        return super().swap_in(generator, state)


@hwrng.hookimpl
def hwrng_platforms():
    return [StallingCPU()]
"""


def _check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hwrng", "check", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_check_passes_and_reports_every_verdict() -> None:
    result = _check("--nproc", "4")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert out.startswith("hwrng check: backend cpu (")
    assert "4 rank(s), mesh dp=1 x pp=2 x tp=2, sharded pp, tp, seed 123" in out
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split() == ["rank", "dp", "pp", "tp", "seed"]
    assert [line.split()[-1] for line in table[2:]] == ["123", "124", "125", "126"]
    for check in (
        "uniform_ on a replicated (4, 4)",
        "dropout on a replicated (64,)",
        "uniform_ on uneven (5, 7), Shard(1) on tp",
        "one dim sharded over every mesh dim",
        "model parameters after reset_parameters",
        "local dropout in a named state",
        "dtensor",
        "numpy",
    ):
        line = next(line for line in out.splitlines() if check in line)
        assert " PASS " in line, line
    assert "FAIL" not in out
    # dp=1: no two ranks are replicas, and the report says so instead of "replicas agree"
    for stream in ("torch.cpu", "random", "numpy"):
        line = next(line for line in out.splitlines() if line.startswith(stream))
        assert line.split(None, 2)[2] == "shards differ (no replicas in this mesh)", line
    assert "replicas agree" not in out.split("STREAM")[1].split("dtensor")[0]
    assert re.match(r"hwrng check: PASSED \(14 checks\) in \d", out.rstrip().splitlines()[-1])
    assert "starting 4 rank(s)" in result.stderr and "ready in" in result.stderr


@pytest.mark.parametrize("mesh", ["dp=1,tp=3", "pp=3"])
def test_check_passes_on_meshes_of_odd_sizes(mesh: str) -> None:
    """The check's model splits over any tensor-parallel size (its width follows tp)."""
    result = _check("--mesh", mesh, "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    document = json.loads(result.stdout)
    assert document["ok"] and document["mesh"] == dict(
        (name, int(size)) for name, size in (part.split("=") for part in mesh.split(","))
    )
    assert all(v["ok"] for v in document["ops"] + document["streams"])


def test_check_without_sharded_dims_claims_no_shards() -> None:
    result = _check("--nproc", "4", "--mesh", "dp=2,tp=2", "--sharded", "", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    document = json.loads(result.stdout)
    streams = {v["what"]: v["detail"] for v in document["streams"]}
    for stream in ("torch.cpu", "random", "numpy"):
        assert streams[stream] == "replicas agree (no shards: every rank shares one seed)"
    assert streams["state:hwrng-check/model-parallel-rng"].startswith("nothing to compare")
    assert [s["seed"] for s in document["seeds"]] == [123] * 4


def test_check_json(tmp_path: Path) -> None:
    result = _check("--nproc", "2", "--mesh", "dp=2", "--sharded", "dp", "--seed", "7", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    assert document["ok"] is True and document["mesh"] == {"dp": 2}
    assert [s["seed"] for s in document["seeds"]] == [7, 8]
    assert all(v["ok"] for v in document["ops"] + document["streams"])
    assert result.stderr == "", "no progress lines with --json"


def test_a_backend_that_cannot_position_its_generator_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_distribution(
        tmp_path, "brokencpu-hwrng", "0.1", "brokencpu_hwrng", BROKEN_COUNTER_BACKEND, "brokencpu"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    result = _check("--backend", "brokencpu", "--nproc", "4", env=env)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    failing = [line for line in result.stdout.splitlines() if " FAIL " in line]
    assert any(line.startswith("normal_ on (16, 3), Shard(0) on tp") for line in failing)
    assert "shards draw alike" in result.stdout
    verdict = result.stdout.rstrip().splitlines()[-1]
    assert re.match(r"hwrng check: FAILED \(\d+ of 14 checks\) in \d", verdict), verdict


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nproc", "3", "--mesh", "dp=2,tp=2"], "has 4 ranks, not 3"),
        (["--sharded", "ep"], "'ep' not in the mesh"),
        (["--backend", "nosuch"], "no hwrng backend named 'nosuch'"),
        (["--backend", "cuda"], "unavailable"),
        (["--seed", "-1"], "must be >= 0"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hwrng check: error: ") and message in err and err.count("\n") == 1


def test_nproc_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["check", "--nproc", "0"])
    assert caught.value.code == 2 and "--nproc: must be >= 1" in capsys.readouterr().err


def test_a_rank_that_crashes_exits_3_with_one_line_and_json(tmp_path: Path) -> None:
    write_distribution(
        tmp_path, "crashcpu-hwrng", "0.1", "crashcpu_hwrng", CRASHING_BACKEND, "crashcpu"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    result = _check("--backend", "crashcpu", "--nproc", "2", "--mesh", "dp=2", "--json", env=env)
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    ours = [line for line in result.stderr.splitlines() if line.startswith("hwrng check")]
    assert ours == [ours[0]] and ours[0].startswith(
        "hwrng check: crashed: rank 1 failed: RuntimeError: boom on rank 1"
    ), result.stderr[-3000:]
    document = json.loads(result.stdout)
    assert document["status"] == "crashed" and document["exit_status"] == 3
    assert document["ok"] is False and "boom on rank 1" in document["error"]


def test_check_passes_its_timeout_to_verify(tmp_path: Path) -> None:
    """Rank 1 stalls 6 s before verify: with --timeout 3 rank 0 names it within seconds."""
    write_distribution(
        tmp_path, "stallcpu-hwrng", "0.1", "stallcpu_hwrng", STALLING_BACKEND, "stallcpu"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    args = ("--backend", "stallcpu", "--nproc", "2", "--mesh", "dp=2", "--timeout", "3", "--json")
    result = _check(*args, env=env)
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-3000:]
    error = json.loads(result.stdout)["error"]
    assert (
        "DistributedError: hwrng.verify over all 2 ranks: not every rank arrived within " in error
    )
    assert "timeout=3 s; did not arrive: rank 1" in error, error


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timeout", "0"], "argument --timeout: must be a positive number of seconds, got 0"),
        (
            ["--timeout", "8e9"],
            "argument --timeout: must be at most 1e9 s (about 31 years) (a collective's clock "
            "arithmetic overflows beyond about 7.4e9 s), got 8e9",
        ),
        (["--nproc", "0"], "argument --nproc: must be >= 1, got 0"),
        (["--seed", "x"], "argument --seed: invalid int value: 'x'"),
        (["--nosuch"], "unrecognized arguments: --nosuch"),
    ],
)
def test_parser_errors_are_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["check", *args])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.endswith(f"error: {message}\n") and err.count("\n") == 1


def test_bad_arguments_under_json_print_a_json_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["check", "--json", "--nproc", "0"])
    document = json.loads(capsys.readouterr().out)
    assert document == {
        "ok": False,
        "status": "bad arguments",
        "exit_status": 2,
        "error": "hwrng check: error: argument --nproc: must be >= 1, got 0",
    }
    assert main(["check", "--json", "--sharded", "ep"]) == 2
    document = json.loads(capsys.readouterr().out)
    assert document["status"] == "bad arguments" and "'ep' not in the mesh" in document["error"]


def test_nproc_beyond_what_the_cpu_can_run_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    limit = max(8, 4 * (os.cpu_count() or 1))
    assert main(["check", "--nproc", str(limit + 1)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hwrng check: error: --nproc {limit + 1}, but this machine runs at most")
    assert err.count("\n") == 1


@pytest.mark.parametrize("present", [("RANK", "WORLD_SIZE"), ("RANK", "WORLD_SIZE", "LOCAL_RANK")])
def test_launcher_variables_without_master_addr_are_refused(
    present: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name in present:
        monkeypatch.setenv(name, "0" if name != "WORLD_SIZE" else "2")
    assert main(["check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hwrng check: error: {', '.join(present)} set but ")
    assert err.count("\n") == 1 and "MASTER_ADDR" in err and "torchrun" in err


def test_a_crash_summary_names_the_rank_that_raised_not_those_left_waiting() -> None:
    from hwrng.testing import WorkerError

    waiting = "no answer in time (waiting in a collective for a failed rank?)"
    traceback = 'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: boom\n'
    error = WorkerError("4 rank(s) failed", ((0, waiting), (1, traceback), (2, waiting)))
    assert error.summary() == "rank 1 failed: RuntimeError: boom; rank(s) 0, 2 gave no answer"
    assert WorkerError("all hung", ((0, waiting),)).summary() == f"rank 0 failed: {waiting}"
