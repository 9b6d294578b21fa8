"""The hwrng command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import hwrng
from hwrng._cli import main
from hwrng._cli import main as cli_main
from hwrng._cli._table import format_table


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_backends_table(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "backends")
    assert status == 0
    header, rule, *rows = out.splitlines()
    assert header.split() == [
        "BACKEND",
        "AVAILABLE",
        "DEVICES",
        "DIST",
        "PRIORITY",
        "PACKAGE",
        "[PLUGIN]",
        "WHY",
        "NOT",
    ]
    assert set(rule) <= {"-", " "}
    cpu = next(r for r in rows if r.startswith("cpu "))
    assert cpu.split()[:5] == ["cpu", "yes", "1", "gloo", "0"]
    assert f"hwrng {hwrng.__version__} [cpu]" in cpu
    npu = next(r for r in rows if r.startswith("npu "))
    assert "unavailable" in npu and "torch_npu is not installed" in npu
    assert out.rstrip().endswith("selected: cpu")


def test_backends_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "backends", "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert status == 0 and rows["cpu"]["available"] is True and rows["cuda"]["available"] is False


RFC_PP_TP = """\
seed 123, mesh dp=2 x pp=2 x tp=2 (8 ranks), sharded dims: pp, tp
rank  dp  pp  tp  seed
----  --  --  --  ----
0     0   0   0   123
1     0   0   1   124
2     0   1   0   125
3     0   1   1   126
4     1   0   0   123
5     1   0   1   124
6     1   1   0   125
7     1   1   1   126

4 distinct seed(s) over 8 ranks
ranks that differ only along dp share a seed (replicas)
"""


def test_plan_prints_the_rfc_table(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys, "plan", "--mesh", "dp=2,pp=2,tp=2", "--sharded", "pp,tp", "--seed", "123"
    )
    assert status == 0
    assert out == RFC_PP_TP


def test_plan_other_order_json_and_limit(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys, "plan", "--mesh", "dp=2,pp=2,tp=2", "--sharded", "tp,pp", "--seed", "123", "--json"
    )
    assert status == 0 and json.loads(out)["seeds"] == [123, 125, 124, 126, 123, 125, 124, 126]
    status, out, _ = run(
        capsys, "plan", "--mesh", "dp=4,tp=256", "--sharded", "dp,tp", "--seed", "0", "--limit", "3"
    )
    assert "... 1021 more ranks (--limit 0 prints all)" in out
    assert "1024 distinct seed(s) over 1024 ranks" in out and "every rank has its own seed" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mesh", "dp=2", "--sharded", "tp", "--seed", "1"], "'tp' not in the mesh"),
        (["--mesh", "dp=2", "--seed", "-1"], "must be >= 0"),
        (["--mesh", "dp=0", "--seed", "1"], "positive integer size"),
    ],
)
def test_plan_errors(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    status, _, err = run(capsys, "plan", *args)
    assert status == 2 and message in err and err.startswith("hwrng plan: error: ")


@pytest.mark.parametrize("mesh", ["dp", "dp=two", "dp=2,dp=2", "=2"])
def test_plan_bad_mesh_syntax(capsys: pytest.CaptureFixture[str], mesh: str) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["plan", "--mesh", mesh, "--seed", "1"])
    assert caught.value.code == 2
    assert "--mesh" in capsys.readouterr().err


def test_format_table() -> None:
    assert (
        format_table(["a", "bb"], [[1, "x"], ["long", ""]]) == "a     bb\n----  --\n1     x\nlong"
    )


def test_module_entry_point_and_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hwrng", "--version"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.strip() == f"hwrng {hwrng.__version__}"


def test_plan_on_a_huge_mesh_lists_only_what_it_shows(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "plan",
        "--mesh",
        "dp=100000,tp=100000",
        "--sharded",
        "tp",
        "--seed",
        "1",
        "--limit",
        "2",
    ]
    status, out, _ = run(capsys, *args)
    assert status == 0
    assert (
        "... 9999999998 more ranks" in out
        and "100000 distinct seed(s) over 10000000000 ranks" in out
    )
    status, _, err = run(capsys, "plan", "--mesh", "dp=100000,tp=100000", "--seed", "1", "--json")
    assert status == 2 and "--json lists every rank" in err


def test_plan_limit_must_not_be_negative(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["plan", "--mesh", "dp=2", "--seed", "1", "--limit", "-1"])
    assert caught.value.code == 2 and "must be >= 0" in capsys.readouterr().err


def test_console_script_is_declared() -> None:
    import importlib.metadata

    scripts = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts["hwrng"] == "hwrng._cli:main"


def test_errors_that_used_to_escape(
    cpu: hwrng.Platform, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        pytest.raises(hwrng.InvalidArgumentError, match="enabled must be True or False"),
        hwrng.fork_rng(platform=cpu, enabled="yes"),  # type: ignore[arg-type]
    ):
        pass  # pragma: no cover - never entered
    with pytest.raises(hwrng.InvalidDeviceError, match="empty backend name"):
        hwrng.get_platform(":0")
    with pytest.raises(hwrng.MeshError, match=r"more than 16,777,216"):
        hwrng.seed_plan(1, {"a": 2**40}, [])
    huge = ["plan", "--mesh", "a=4294967296,b=4294967296", "--limit", "2", "--seed", "1"]
    assert cli_main(huge) == 0
    assert "18446744073709551614 more ranks" in capsys.readouterr().out


def test_a_reader_that_leaves_after_one_line_ends_plan_quietly() -> None:
    # 65,536 rows (1.5 MB): far more than a pipe holds, so the reader leaves mid-output
    command = ["plan", "--mesh", "dp=256,tp=256", "--sharded", "dp,tp", "--seed", "1"]
    with subprocess.Popen(
        [sys.executable, "-m", "hwrng", *command, "--limit", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()
        errors = process.stderr.read().decode()
        status = process.wait(timeout=120)
    assert first.startswith(b"seed 1, mesh dp=256 x tp=256 (65536 ranks)")
    assert errors == "", errors  # no traceback, no "Exception ignored ... BrokenPipeError"
    assert status == 141


@pytest.mark.parametrize(
    "arguments",
    [
        ["backends"],
        ["backends", "--json"],
        ["plan", "--mesh", "dp=2,tp=2", "--seed", "1"],
        ["plan", "--mesh", "dp=2,tp=2", "--seed", "1", "--json"],
        ["--help"],
        ["plan", "--help"],
        ["--version"],
    ],
)
def test_every_command_stops_quietly_when_stdout_is_a_closed_pipe(arguments: list[str]) -> None:
    # the reader is gone before the command starts: its first write fails, however short
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "hwrng", *arguments],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(writer)
    assert result.stderr == "", result.stderr
    assert result.returncode == 141


_FAILING_PIPE = """
import sys
from hwrng._cli import backends, main

def failing(args):
    raise BrokenPipeError(32, "Broken pipe (a pipe to a rank, not stdout)")

backends.run_backends = failing
sys.exit(main(["backends"]))
"""


def test_a_broken_pipe_other_than_stdout_is_not_hidden() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _FAILING_PIPE],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "BrokenPipeError: [Errno 32] Broken pipe (a pipe to a rank" in result.stderr
