"""The example out-of-tree backend: installed offline, discovered, and conformant."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import install_example

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "hwrng-example-vcpu"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return install_example(EXAMPLE, tmp_path_factory.mktemp("example"))


def hwrng_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hwrng", *args], capture_output=True, text=True, env=env, timeout=600
    )


def test_backends_lists_the_example(installed: dict[str, str]) -> None:
    result = hwrng_cli(installed, "backends")
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("vcpu "))
    assert row.split()[:5] == ["vcpu", "yes", "2", "gloo", "-10"]
    assert "hwrng-example-vcpu 0.1.0 [vcpu]" in row
    assert "selected: cpu" in result.stdout, "a software device never wins auto-selection"


def test_example_passes_the_conformance_suite(installed: dict[str, str]) -> None:
    result = hwrng_cli(installed, "conformance", "--backend", "vcpu", "--nproc", "2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    verdict = result.stdout.strip().splitlines()[-1]
    assert verdict.startswith("hwrng conformance: backend vcpu CONFORMS (")
    assert " 0 failed, 2 skipped)" in verdict
    skipped = [
        line for line in result.stdout.splitlines() if line.startswith("vcpu") and " SKIP " in line
    ]
    assert len(skipped) == 2, skipped
    dtensor, graphs = sorted(skipped, key=lambda line: "graph" in line)
    assert "dtensor_adapter" in dtensor and "lacks capability 'dtensor'" in dtensor
    assert "lacks capability 'graph_safe_states'" in graphs
