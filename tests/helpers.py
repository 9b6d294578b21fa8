"""Oracles and builders shared by several test modules (independent of the code under test)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.tensor import Shard

from hwrng.testing import DistributedPool

__all__ = [
    "held_indices",
    "hwrng_backends",
    "install_example",
    "pool_fixture",
    "write_distribution",
]


def pool_fixture(nproc: int, *, timeout: float = 120.0, name: str = "pool") -> Any:
    """A module-scoped fixture ``name``: a started pool of ``nproc`` gloo ranks.

    Every multi-process test module states only its world size and timeout::

        pool = pool_fixture(8, timeout=120)

    The pool starts once per module that asks for it and stops after the module's
    last test; modules never share one.
    """

    @pytest.fixture(scope="module", name=name)
    def started_pool() -> Iterator[DistributedPool]:
        with DistributedPool(nproc, timeout=timeout) as started:
            yield started

    return started_pool


def held_indices(
    shape: tuple[int, ...],
    mesh_shape: tuple[int, ...],
    placements: tuple[Any, ...],
    coordinate: tuple[int, ...],
) -> frozenset[int]:
    """The oracle: split an index tensor as DTensor's Shard does (torch.chunk), dim by dim."""
    local = torch.arange(math.prod(shape)).reshape(shape)
    for placement, size, c in zip(placements, mesh_shape, coordinate, strict=True):
        if isinstance(placement, Shard):
            pieces = (
                torch.chunk(local, size, dim=placement.dim) if local.shape[placement.dim] else ()
            )
            if c < len(pieces):
                local = pieces[c]
            else:
                empty = list(local.shape)
                empty[placement.dim] = 0
                local = local.new_empty(empty)
    return frozenset(local.flatten().tolist())


def write_distribution(
    root: Path, dist: str, version: str, module: str, source: str, entry_name: str
) -> None:
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[hwrng]\n{entry_name} = {module}\n")


def hwrng_backends(
    site: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m hwrng backends`` in a fresh interpreter.

    ``site`` goes first on its ``PYTHONPATH`` (a folder of distributions made by
    :func:`write_distribution`), ``env`` is added to this process's environment.
    """
    full = {**os.environ, **(env or {})}
    if site is not None:
        full["PYTHONPATH"] = os.pathsep.join([str(site), *sys.path])
    return subprocess.run(
        [sys.executable, "-m", "hwrng", "backends"],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        check=False,
    )


def install_example(example: Path, work: Path) -> dict[str, str]:
    """Install an example backend distribution offline into ``work``; the environment to see it.

    The source is copied first, so setuptools' leftovers never land in the checkout.
    """
    source = work / "source"
    shutil.copytree(example, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = work / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), *sys.path])}
