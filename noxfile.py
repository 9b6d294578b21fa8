"""hwrng's version matrix: the test suite on each torch hwrng claims, each in its own venv.

Run every cell with ``nox -s tests``, one with ``nox -s "tests(torch='2.15.0')"``, and
narrow a cell with pytest arguments after ``--`` (``nox -s tests -- tests/test_cuda.py``).
``.ci/run`` runs them all. Each cell is described by a :class:`Cell`; a new session
(another tool, another selection) is one more ``@nox.session`` function below.
"""

from __future__ import annotations

from dataclasses import dataclass

import nox

nox.options.error_on_missing_interpreters = True
nox.options.reuse_existing_virtualenvs = True


@dataclass(frozen=True)
class Cell:
    """One torch of the matrix: how it is installed, and what runs on it.

    Attributes
    ----------
    requirement
        The pip requirement that installs this torch.
    unconstrained
        True where the torch lies above this machine's global pip cap
        (``/etc/xdg/pip/constraints.txt``): its install command alone runs
        with ``PIP_CONSTRAINT=/dev/null``.
    triton
        True where the cell must check the fused Triton kernel in Triton's
        CPU interpreter (the CUDA wheels of torch bring Triton as a dependency):
        the session fails if Triton is missing instead of letting the test skip.
    selection
        The pytest arguments the cell runs when none are given after ``--``;
        empty for the whole suite.
    """

    requirement: str
    unconstrained: bool = False
    triton: bool = False
    selection: tuple[str, ...] = ()


#: What the DTensor adapter meets first on torch 2.14: ``run_dtensor_rng_op`` on the
#: accelerator path, and CUDA graphs registering generator states per capture.
ADAPTER_TESTS = (
    "tests/test_dtensor_adapter.py",
    "tests/test_dtensor_dispatch_keys.py",
    "tests/test_dtensor_dist.py",
    "tests/test_graph_states.py",
    "tests/test_cuda.py",
)

#: The matrix, by torch version: the floor ``pyproject.toml`` claims, which is also the
#: torch CI's own environment uses (its CPU wheel, no CUDA libraries); the first torch
#: with the accelerator dispatch and per-capture CUDA graph changes; the newest release.
#: torch 2.11 and 2.12 fail: their ``torch.Generator`` cannot be weakly referenced, which
#: hwrng's host counter needs. A whole-suite cell takes about 4 minutes on 2 cores, plus
#: its install (the CUDA wheels bring about 4 GB of libraries, and Triton).
CELLS: dict[str, Cell] = {
    "2.13.0": Cell("torch==2.13.0+cpu"),
    "2.14.1": Cell("torch==2.14.1", selection=ADAPTER_TESTS),
    "2.15.0": Cell("torch==2.15.0", unconstrained=True, triton=True),
}


def _install(session: nox.Session, cell: Cell) -> None:
    """Install the cell's torch and hwrng with its test extra in one pip command.

    One command, so that pip resolves hwrng's ``torch>=`` against the torch just
    named instead of reinstalling a capped one on a second command.
    """
    env = {"PIP_CONSTRAINT": "/dev/null"} if cell.unconstrained else {}
    session.install(cell.requirement, "-e", ".[test]", env=env)


@nox.session
@nox.parametrize("torch", list(CELLS))
def tests(session: nox.Session, torch: str) -> None:
    """The test suite on one torch of the matrix, CPU only."""
    cell = CELLS[torch]
    _install(session, cell)
    session.run("python", "-c", "import torch; print('torch', torch.__version__)")
    if cell.triton:
        # The interpreter test skips where Triton is absent; here that is a failure.
        session.run("python", "-c", "import triton; print('triton', triton.__version__)")
    # This worktree's code, not a copy installed elsewhere.
    session.env.pop("PYTHONPATH", None)
    session.run("python", "-m", "pytest", "-q", *(session.posargs or cell.selection))


#: The torch the trainer integrations are tested with (the releases pinned in the extras
#: ``lightning``, ``accelerate`` and ``torchtitan`` install with it).
TRAINERS_TORCH = "torch==2.13.0+cpu"


@nox.session
def trainers(session: nox.Session) -> None:
    """``hwrng.integrations`` against the pinned Lightning, accelerate and torchtitan (CPU)."""
    session.install(TRAINERS_TORCH, "-e", ".[test,lightning,accelerate,torchtitan]")
    session.env.pop("PYTHONPATH", None)
    session.run("python", "-m", "pytest", "-q", *(session.posargs or ("tests/integrations",)))


#: The torch the documentation site is built with: mkdocstrings reads the source, but
#: ``pip install -e .`` needs a torch, and the CPU wheel is the small one.
DOCS_TORCH = "torch==2.13.0+cpu"


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site, built strictly: broken links, anchors or references fail.

    Then ``tests/test_docs_build.py`` reads the built site: every default the API
    reference shows against the code, every link against the files (the site must
    work opened from disk). The trainers are not installed here: their pages are
    checked against the source.
    """
    session.install(DOCS_TORCH, "-e", ".[docs,test]")
    session.env.pop("PYTHONPATH", None)
    session.run("mkdocs", "build", "--strict", "--site-dir", "site")
    tests = session.posargs or ("tests/test_docs_build.py",)
    session.run("python", "-m", "pytest", "-q", *tests, env={"HWRNG_DOCS_SITE": "site"})
