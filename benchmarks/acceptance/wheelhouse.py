"""The wheelhouse a GPU machine without a package index installs from, and how it travels.

``gpu_acceptance.py --prepare`` runs here, where pip reaches an index, in the
checkout the GPU machine will get a copy of: it downloads pure-Python wheels
(``py3-none-any``, so any Python the machine has installs them) of what the
GPU image may lack -- pytest and what it needs (the CUDA tests, the graph
tests and ``hwrng conformance`` run under pytest; no step needs hypothesis),
setuptools >= 70.1 (below 82, which torch 2.11 requires) and wheel (the
editable install of the checkout builds offline with them) -- into
:data:`WHEELHOUSE`, an ignored folder, records the checkout's commit beside
them (:mod:`acceptance.provenance`), and checks that the tree and the
wheelhouse together fit what the device tool carries (:data:`CARRY_LIMIT`).
``--install`` installs them there first, offline (:mod:`acceptance.install`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from acceptance import provenance

#: The wheelhouse, relative to the repository root (ignored by .gitignore; carried).
WHEELHOUSE = ".wheelhouse"
#: What the install step asks pip for, from the wheelhouse alone. setuptools below 82: torch
#: 2.11 (the GPU image's) requires it (inductor and cpp_extension import setuptools).
REQUIREMENTS = ("pytest>=8.0", "setuptools>=70.1,<82", "wheel")
#: Downloaded too: what pytest needs on Python 3.10 only (pip evaluates a requirement's
#: markers for the Python that downloads, not the one that will install).
FOR_OLDER_PYTHONS = ("exceptiongroup>=1", "tomli>=1")
#: The requirements' file the install step reads, inside the wheelhouse.
REQUIREMENTS_FILE = "requirements.txt"
#: What the device tool sends at most: the tree (tracked and untracked-not-ignored files)
#: and the carried paths together.
CARRY_LIMIT = 64 * 2**20
#: The device tool's ``carry`` list for the run.
CARRY = (WHEELHOUSE,)
#: The one command the device tool runs, from the repository root, with ``$OUT`` set.
DEVICE_COMMAND = 'python3 benchmarks/gpu_acceptance.py --install --out "$OUT/gpu-acceptance"'
#: A wheel's file name: name-version(-build)-python-abi-platform.whl
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-"
                    r"(?P<platform>[^-]+)\.whl$")  # fmt: skip


@dataclass(frozen=True)
class Prepared:
    """What ``--prepare`` made: the wheels, the commit recorded and the sizes that travel."""

    wheels: tuple[str, ...]
    commit: str
    wheelhouse_bytes: int
    tree_bytes: int


def not_pure(names: list[str]) -> list[str]:
    """The file names among ``names`` that are not pure-Python wheels (``*-none-any.whl``)."""
    bad = []
    for name in names:
        found = _WHEEL.match(name)
        pure = found is not None and (found["abi"], found["platform"]) == ("none", "any")
        if not pure or not all(tag.startswith("py") for tag in found["py"].split(".")):
            bad.append(name)
    return bad


def download(wheelhouse: Path) -> list[str]:
    """Download the pure-Python wheels of :data:`REQUIREMENTS` and their needs; their names.

    Raises
    ------
    RuntimeError
        If pip fails, or brings a wheel that is not pure Python.
    """
    command = [
        sys.executable, "-m", "pip", "download", "--dest", str(wheelhouse),
        "--only-binary=:all:", "--platform", "any", "--implementation", "py", "--abi", "none",
        "--python-version", "3.10", "--disable-pip-version-check", "--no-input",
        *REQUIREMENTS, *FOR_OLDER_PYTHONS,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pip download failed ({done.returncode}):\n{done.stderr[-3000:]}")
    names = sorted(path.name for path in wheelhouse.glob("*.whl"))
    bad = not_pure(names)
    if bad:
        raise RuntimeError(f"not pure-Python wheels, which another Python could not install: {bad}")
    return names


def size(paths: list[Path]) -> int:
    """The bytes of these files, and of every file under these folders."""
    total = 0
    for path in paths:
        files = path.rglob("*") if path.is_dir() else [path]
        total += sum(p.stat().st_size for p in files if p.is_file() and not p.is_symlink())
    return total


def prepare(root: Path) -> Prepared:
    """Build :data:`WHEELHOUSE` anew under ``root`` and record the checkout's commit in it.

    Raises
    ------
    RuntimeError
        If a download fails, or the tree and the wheelhouse exceed :data:`CARRY_LIMIT`.
    """
    wheelhouse = root / WHEELHOUSE
    shutil.rmtree(wheelhouse, ignore_errors=True)
    wheelhouse.mkdir()
    wheels = download(wheelhouse)
    (wheelhouse / REQUIREMENTS_FILE).write_text("\n".join(REQUIREMENTS) + "\n", encoding="utf-8")
    recorded = provenance.write(root, wheelhouse)
    tree = size([root / name for name in recorded["files"]])
    carried = size([wheelhouse])
    if tree + carried > CARRY_LIMIT:
        raise RuntimeError(
            f"the tree ({tree / 2**20:.1f} MiB) and {WHEELHOUSE} ({carried / 2**20:.1f} MiB) "
            f"exceed the {CARRY_LIMIT / 2**20:.0f} MiB the device tool carries"
        )
    return Prepared(tuple(wheels), provenance.named(recorded), carried, tree)


def summary(done: Prepared) -> str:
    """What ``--prepare`` says: the wheels, the sizes, the command and the carry list."""
    mib = 2**20
    return "\n".join(
        [
            f"{WHEELHOUSE}: {len(done.wheels)} pure-Python wheels, "
            f"{done.wheelhouse_bytes / mib:.2f} MiB: {', '.join(done.wheels)}",
            f"recorded commit {done.commit} in {WHEELHOUSE}/{provenance.RECORD}",
            f"travels: the tree {done.tree_bytes / mib:.2f} MiB + {WHEELHOUSE} "
            f"{done.wheelhouse_bytes / mib:.2f} MiB = "
            f"{(done.tree_bytes + done.wheelhouse_bytes) / mib:.2f} MiB "
            f"of {CARRY_LIMIT / mib:.0f} MiB",
            f"device command: {DEVICE_COMMAND}",
            f"carry: {list(CARRY)}",
        ]
    )
