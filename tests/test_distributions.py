"""The repository's distributions: one version, exact sibling pins, no cycle, mismatch reported.

``pyproject.toml`` (hwrng), ``backends/cuda``, ``backends/npu`` and ``conformance`` are
released together: each sibling requires ``hwrng==<version>`` and the root's extras require
each sibling at that version, while no required dependency leads back (extras are not
required). A plugin whose distribution pins another hwrng is reported, and not used.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helpers import hwrng_backends

import hwrng

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]
SIBLINGS = {
    "hwrng-cuda": ROOT / "backends" / "cuda",
    "hwrng-npu": ROOT / "backends" / "npu",
    "hwrng-conformance": ROOT / "conformance",
}


def _project(directory: Path) -> dict[str, Any]:
    project: dict[str, Any] = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
    return project


def _name(requirement: str) -> str:
    return re.split(r"[\s\[=<>!~;]", requirement, maxsplit=1)[0]


def test_every_distribution_has_hwrngs_version() -> None:
    assert _project(ROOT)["version"] == hwrng.__version__
    for name, directory in SIBLINGS.items():
        project = _project(directory)
        assert (project["name"], project["version"]) == (name, hwrng.__version__)


def test_siblings_pin_each_other_exactly_and_extras_reach_them() -> None:
    version = hwrng.__version__
    for directory in SIBLINGS.values():
        assert f"hwrng=={version}" in _project(directory)["dependencies"]
    extras = _project(ROOT)["optional-dependencies"]
    assert extras["cuda"] == [f"hwrng-cuda=={version}"]
    assert extras["npu"] == [f"hwrng-npu=={version}"]
    assert extras["conformance"] == [f"hwrng-conformance=={version}"]


def test_no_cycle_among_required_dependencies() -> None:
    required = {"hwrng": {_name(r) for r in _project(ROOT)["dependencies"]}}
    required |= {
        name: {_name(r) for r in _project(directory)["dependencies"]}
        for name, directory in SIBLINGS.items()
    }
    assert not required["hwrng"] & set(SIBLINGS), "the core requires no sibling"
    for name, needs in required.items():
        assert name not in needs
        for need in needs & set(required):
            assert name not in required[need], f"{name} <-> {need}"


def test_torch_npu_is_an_extra_of_hwrng_npu_never_a_requirement() -> None:
    project = _project(SIBLINGS["hwrng-npu"])
    assert not any(_name(r) == "torch-npu" for r in project["dependencies"])
    assert project["optional-dependencies"]["torch-npu"] == ["torch-npu"]
    for requirements in _project(ROOT)["optional-dependencies"].values():
        assert not any(_name(r) == "torch-npu" for r in requirements)


def test_trainer_extras_are_ranges_not_pins() -> None:
    extras = _project(ROOT)["optional-dependencies"]
    for trainer in ("lightning", "accelerate", "torchtitan"):
        (requirement,) = extras[trainer]
        assert "==" not in requirement and "<" in requirement and ">=" in requirement


def test_every_plugin_registers_through_hwrngs_entry_point_group() -> None:
    groups = {name: _project(d)["entry-points"] for name, d in SIBLINGS.items()}
    assert groups["hwrng-cuda"] == {"hwrng": {"cuda": "hwrng_cuda"}}
    assert groups["hwrng-npu"] == {"hwrng": {"npu": "hwrng_npu"}}
    assert groups["hwrng-conformance"] == {"hwrng": {"conformance": "hwrng_conformance.command"}}
    assert "pytest11" not in groups["hwrng-conformance"], "never auto-loaded into every pytest"
    assert _project(ROOT)["entry-points"] == {"hwrng": {"cpu": "hwrng.backends.cpu"}}


MISMATCHED = """
import hwrng
from hwrng.backends.cpu import CPUPlatform


class OldPlatform(CPUPlatform):
    name = "oldcpu"
    priority = -10


@hwrng.hookimpl
def hwrng_platforms():
    return [OldPlatform()]
"""


def test_a_backend_built_for_another_hwrng_is_reported_and_not_used(tmp_path: Path) -> None:
    root = tmp_path / "site"
    root.mkdir()
    (root / "oldcpu_backend.py").write_text(MISMATCHED)
    info = root / "hwrng_oldcpu-0.0.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hwrng-oldcpu\nVersion: 0.0.9\nRequires-Dist: hwrng==0.0.9\n"
    )
    (info / "entry_points.txt").write_text("[hwrng]\noldcpu = oldcpu_backend\n")
    result = hwrng_backends(root)
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("oldcpu"))
    assert "unavailable" in row and "hwrng-oldcpu 0.0.9" in row
    assert (
        f"hwrng-oldcpu 0.0.9 requires hwrng==0.0.9, but hwrng {hwrng.__version__} is "
        'installed: install the hwrng it requires (pip install "hwrng==0.0.9") or a release of '
        f"hwrng-oldcpu that accepts hwrng {hwrng.__version__}"
    ) in row
