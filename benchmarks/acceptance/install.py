"""The install step: the wheelhouse, then the checkout, into this Python, offline.

Two pip commands, neither of which reaches an index:

1. ``pip install --no-index --find-links WHEELHOUSE -r WHEELHOUSE/requirements.txt``:
   pytest (and what it needs), setuptools >= 70.1 (< 82) and wheel, each only
   where the machine lacks it (``acceptance.wheelhouse`` says why each);
2. ``pip install --no-index --no-deps --no-build-isolation -e . -e backends/cuda
   -e conformance``: hwrng, hwrng-cuda and hwrng-conformance, editable, so the
   steps run the checkout's own code; built by the setuptools of step 1.

Passes when both succeed. Refused, before pip runs, where this Python has hwrng
installed from somewhere else than this checkout: the step would replace it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acceptance._figures import run_probe
from acceptance.wheelhouse import REQUIREMENTS_FILE, WHEELHOUSE

ROOT = Path(__file__).resolve().parents[2]
#: The checkout's distributions, installed editable: (name, folder under the root).
DISTRIBUTIONS = (
    ("hwrng", "."),
    ("hwrng-cuda", "backends/cuda"),
    ("hwrng-conformance", "conformance"),
)
_PIP = [sys.executable, "-m", "pip", "install", "--no-index", "--disable-pip-version-check",
        "--no-input", "--no-warn-script-location"]  # fmt: skip


def installed_elsewhere(root: Path) -> list[str]:
    """The checkout's distributions this Python has from somewhere else than ``root``."""
    elsewhere = []
    for name, folder in DISTRIBUTIONS:
        try:
            found = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        origin = json.loads(found.read_text("direct_url.json") or "{}").get("url", "")
        if origin.removeprefix("file://").rstrip("/") != str((root / folder).resolve()):
            elsewhere.append(f"{name} {found.version} ({origin or found.locate_file('')})")
    return elsewhere


def commands(root: Path, wheelhouse: Path) -> list[list[str]]:
    """The two pip commands, in order."""
    editable = [arg for _, folder in DISTRIBUTIONS for arg in ("-e", str(root / folder))]
    return [
        [*_PIP, "--find-links", str(wheelhouse), "-r", str(wheelhouse / REQUIREMENTS_FILE)],
        [*_PIP, "--no-deps", "--no-build-isolation", *editable],
    ]


def _versions() -> dict[str, str]:
    names = ["pytest", "setuptools", "wheel", *(name for name, _ in DISTRIBUTIONS)]
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "missing"
    return found


def main() -> tuple[str, str, dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheelhouse", type=Path, default=ROOT / WHEELHOUSE)
    wheelhouse = parser.parse_args().wheelhouse.resolve()
    figures: dict[str, Any] = {"wheelhouse": str(wheelhouse), "python": sys.executable}
    if not (wheelhouse / REQUIREMENTS_FILE).is_file():
        return "failed", (
            f"no wheelhouse at {wheelhouse}: run python3 benchmarks/gpu_acceptance.py --prepare "
            f"where pip reaches an index, and carry {WHEELHOUSE}"
        ), figures  # fmt: skip
    elsewhere = installed_elsewhere(ROOT)
    if elsewhere:
        figures["installed elsewhere"] = elsewhere
        return "failed", (
            f"not installed: this Python ({sys.executable}) has {'; '.join(elsewhere)}, which "
            "the editable install of this checkout would replace; use a fresh interpreter"
        ), figures  # fmt: skip
    for number, command in enumerate(commands(ROOT, wheelhouse), start=1):
        print("$", " ".join(command), flush=True)
        done = subprocess.run(command, cwd=ROOT, check=False)
        if done.returncode != 0:
            figures["versions"] = _versions()
            return "failed", f"pip command {number} of 2 exited {done.returncode}", figures
    figures["versions"] = _versions()
    said = ", ".join(f"{name} {version}" for name, version in figures["versions"].items())
    return "passed", f"offline from {wheelhouse.name}: {said}", figures


if __name__ == "__main__":
    raise SystemExit(run_probe(main))
