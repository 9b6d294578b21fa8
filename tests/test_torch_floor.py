"""``import hwrng`` on a torch below the floor names the floor, before anything else breaks.

The version check on version strings; the check wired into ``import hwrng`` ahead of every
other module (read from the source); the floor the same as pyproject.toml's requirement;
and, where ``HWRNG_BELOW_FLOOR_PYTHON`` names an interpreter with such a torch (a venv with
``pip install torch==2.9.1``), the import itself in that interpreter.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest

from hwrng import HwrngError
from hwrng._exceptions import TorchVersionError
from hwrng._torch_floor import TORCH_FLOOR, below_floor, require_supported_torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("version", "below"),
    [
        ("2.9.1+cu128", True),
        ("2.9.0", True),
        ("1.13.1", True),
        ("2.10.0", False),
        ("2.10.0a0+git5a1b2c3", False),  # a nightly of the floor's release
        ("2.11.0+cu130", False),
        ("2.13.0+cpu", False),
        ("3.0.0", False),
        ("unknown", False),  # cannot be judged: the checks by feature speak instead
    ],
)
def test_the_floor_is_judged_on_the_release(version: str, below: bool) -> None:
    assert below_floor(version) is below


def test_a_torch_below_the_floor_is_refused_naming_the_floor_the_torch_and_the_fix() -> None:
    with pytest.raises(TorchVersionError) as raised:
        require_supported_torch("2.9.1+cu128")
    assert isinstance(raised.value, ImportError) and isinstance(raised.value, HwrngError)
    message = str(raised.value)
    assert "hwrng needs torch >= 2.10" in message
    assert "torch 2.9.1+cu128" in message
    assert "pip install --upgrade 'torch>=2.10'" in message
    require_supported_torch("2.10.0")  # the floor itself passes


def test_the_floor_is_pyprojects_requirement() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    required = re.search(r'"torch>=(\d+)\.(\d+)"', pyproject)
    assert required, "pyproject.toml requires no torch>=X.Y"
    assert (int(required.group(1)), int(required.group(2))) == TORCH_FLOOR


def test_import_hwrng_checks_the_floor_before_importing_anything_else() -> None:
    tree = ast.parse((ROOT / "hwrng" / "__init__.py").read_text(encoding="utf-8"))
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    first = imports[1]  # after `from __future__ import annotations`
    assert isinstance(imports[0], ast.ImportFrom) and imports[0].module == "__future__"
    assert isinstance(first, ast.ImportFrom)
    assert (first.module, [a.name for a in first.names]) == ("hwrng", ["_torch_floor"])


@pytest.mark.skipif(
    not os.environ.get("HWRNG_BELOW_FLOOR_PYTHON"),
    reason="HWRNG_BELOW_FLOOR_PYTHON names no interpreter with a torch below the floor",
)
def test_import_hwrng_on_a_torch_below_the_floor() -> None:
    python = os.environ["HWRNG_BELOW_FLOOR_PYTHON"]
    code = "import torch; print(torch.__version__, flush=True); import hwrng"
    done = subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    version = done.stdout.strip()
    assert below_floor(version), f"{python} has torch {version}, not below the floor"
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("hwrng._exceptions.TorchVersionError: hwrng needs torch >= 2.10")
    assert f"has torch {version}" in last
