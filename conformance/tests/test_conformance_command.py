"""``hwrng conformance``: it runs only its own files and gives honest verdicts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hwrng
from hwrng._cli import main as cli_main


def _conformance(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hwrng", "conformance", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def test_conformance_never_runs_a_conftest_from_the_current_directory(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "conftest.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:nonexistent\n")
    result = _conformance("--backend", "cpu", "--nproc", "2", "--", "-k", "fork_rng", cwd=tmp_path)
    assert not marker.exists(), "a conftest.py in the current directory was executed"
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    verdict = result.stdout.strip().splitlines()[-1]
    assert verdict.startswith("hwrng conformance: backend cpu PARTIAL"), verdict
    assert "deselected" in verdict


@pytest.mark.parametrize("nproc", ["0", "1", "-5"])
def test_conformance_refuses_too_few_ranks(nproc: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli_main(["conformance", "--nproc", nproc])
    assert caught.value.code == 2
    assert "--nproc: must be >= 2" in capsys.readouterr().err


def test_conformance_with_nothing_to_check_is_not_verified() -> None:
    env = {**os.environ, "HWRNG_DISABLE_PLUGINS": "cpu,cuda,npu"}
    result = _conformance(env=env)
    assert result.returncode == 1
    assert "NOT VERIFIED" in result.stdout and "NOTSET" not in result.stdout


def test_conformance_names_its_own_option_for_an_unknown_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["conformance", "--backend", "nosuch"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("hwrng conformance: error: --backend nosuch: no hwrng backend")
    assert captured.err.count("\n") == 1


def test_conformance_on_an_unavailable_backend_fails_clearly() -> None:
    if hwrng.get_platform().name == "cuda":
        pytest.skip("this machine has CUDA")
    result = subprocess.run(
        [sys.executable, "-m", "hwrng", "conformance", "--backend", "cuda"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(
        "hwrng conformance: error: --backend cuda: hwrng backend 'cuda' is unavailable"
    )
    assert result.stderr.count("\n") == 1 and result.stdout == "", "one line, no empty table"


def test_without_pytest_the_command_says_so_in_one_line() -> None:
    code = (
        "import sys; sys.modules['pytest'] = None  # as on a machine without pytest\n"
        "from hwrng._cli import main\n"
        "sys.exit(main(['conformance', '--backend', 'cpu']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "hwrng conformance: error: pytest is not installed, and the suite's rules run under it: "
        'pip install "pytest>=8.0" (hwrng-conformance requires it; pip install --no-deps leaves '
        "it out)"
    ]
