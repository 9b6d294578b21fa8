"""hwrng's version matrix: the test suite on each torch hwrng claims, each in its own venv.

Run every cell with ``nox -s tests``, one with ``nox -s "tests(torch='2.15.0')"``, and
narrow a cell with pytest arguments after ``--``
(``nox -s tests -- backends/cuda/tests/test_cuda.py``).
``.ci/run`` runs them all. Each cell is described by a :class:`Cell`; a new session
(another tool, another selection) is one more ``@nox.session`` function below.
"""

from __future__ import annotations

import os
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
        The pytest arguments the cell runs when none are given after ``--``:
        test files, or ``--ignore=`` paths left out of the whole suite; empty
        for the whole suite.
    """

    requirement: str
    unconstrained: bool = False
    triton: bool = False
    selection: tuple[str, ...] = ()


#: What differs most between torch releases: the DTensor adapter (``run_dtensor_rng_op`` and
#: ``_compute_rng_offsets`` from 2.12, for CUDA tensors to 2.14 and the accelerator from 2.15,
#: neither on 2.10 and 2.11), CUDA graphs registering generator states per capture (from 2.14),
#: the fused Triton kernel of the invariant ops, in Triton's interpreter (the CUDA wheels bring
#: Triton), and the private frames of ``torch.utils.checkpoint`` the recompute journal reads
#: (``_checkpoint_impl`` from 2.15), with DTensor dropout recomputed on gloo ranks.
ADAPTER_TESTS = (
    "tests/test_dtensor_adapter.py",
    "tests/test_dtensor_dispatch_keys.py",
    "tests/test_dtensor_dist.py",
    "tests/test_graph_states.py",
    "backends/cuda/tests/test_cuda.py",
    "tests/test_philox_triton.py",
    "tests/test_recompute.py",
    "tests/test_recompute_dist.py",
)

#: What runs once, on 2.13 (the README's command runs the whole suite there), and is left out of
#: the edges of the range (2.10 and 2.15): subjects that meet none of the private torch parts
#: that differ between releases. The docs' blocks and links; the crash matrix of the checkpoint
#: commit (file events; DCP's save and load run at both edges in tests/test_resume_dist.py); the
#: out-of-tree example backends (built and conformance-checked again by ``nox -s wheels``);
#: hwrng.verify's own judgement (the verify streams run at both edges in ``hwrng check``,
#: tests/test_check_cli.py, and verify's arrival, timeouts and digests in their own suites); the
#: training example (4 gloo ranks; its parts run at both edges in the suites below); the GPU
#: acceptance script's logic, the conformance command's process handling, the presets' collision
#: counts (arithmetic) and the version pins (pip's reading). tests/test_version_matrix.py checks
#: that these files exist and that both edges still run the core, seeding, resume, DTensor,
#: invariant, recompute, verify-arrival and ``hwrng check`` suites.
SAME_ON_EVERY_TORCH = (
    "tests/test_docs_blocks.py",
    "tests/test_docs_site.py",
    "tests/test_crash_consistency.py",
    "tests/test_example_backend.py",
    "tests/test_example_nooffset.py",
    "tests/test_verify_dist.py",
    "tests/test_verify_rules_dist.py",
    "tests/test_verify_soundness_dist.py",
    "tests/test_verify_simulated.py",
    "tests/test_train_example.py",
    "tests/test_gpu_acceptance.py",
    "tests/test_preset_collisions.py",
    "tests/test_version_pins.py",
    "conformance/tests/test_conformance_command.py",
)

#: What the edges of the range run: the whole suite but SAME_ON_EVERY_TORCH.
EDGE_SELECTION = tuple(f"--ignore={path}" for path in SAME_ON_EVERY_TORCH)

#: The matrix, by torch version: the floor ``pyproject.toml`` claims (2.10, NVIDIA's NGC 25.12
#: container's) and the newest release (2.15), each EDGE_SELECTION; the GPU machines' torch
#: (2.11) and the first torch with CUDA graphs registering generator states per capture (2.14),
#: each ADAPTER_TESTS; the torch CI's own environment uses (2.13, its CPU wheel, no CUDA
#: libraries: the README's command, the whole suite). Only 2.13 has a CPU wheel here: the others
#: are CUDA wheels, which bring about 4 GB of libraries and Triton, and import torch about 1.7
#: times slower (every rank of every multi-process test pays it) (README, "Versions tested").
CELLS: dict[str, Cell] = {
    "2.10.0": Cell("torch==2.10.0", triton=True, selection=EDGE_SELECTION),
    "2.11.0": Cell("torch==2.11.0", triton=True, selection=ADAPTER_TESTS),
    "2.13.0": Cell("torch==2.13.0+cpu"),
    "2.14.1": Cell("torch==2.14.1", triton=True, selection=ADAPTER_TESTS),
    "2.15.0": Cell("torch==2.15.0", unconstrained=True, triton=True, selection=EDGE_SELECTION),
}


#: Every distribution of the repository, editable, as ``./setup.sh`` installs them.
SIBLINGS = ("-e", "./conformance", "-e", "./backends/cuda", "-e", "./backends/npu")


def _install(session: nox.Session, cell: Cell) -> None:
    """Install the cell's torch and every distribution with hwrng's test extra in one command.

    One command, so that pip resolves hwrng's ``torch>=`` against the torch just
    named instead of reinstalling a capped one on a second command.
    """
    env = {"PIP_CONSTRAINT": "/dev/null"} if cell.unconstrained else {}
    session.install(cell.requirement, "-e", ".[test]", *SIBLINGS, env=env)


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


#: The torch the trainer integrations are tested with, and the exact releases tested (the
#: extras ``lightning``, ``accelerate`` and ``torchtitan`` admit a range around them).
TRAINERS_TORCH = "torch==2.13.0+cpu"
TRAINERS = ("lightning==2.6.6", "accelerate==1.15.0", "torchtitan==0.3.0")


@nox.session
def trainers(session: nox.Session) -> None:
    """``hwrng.integrations`` against the pinned Lightning, accelerate and torchtitan (CPU)."""
    session.install(TRAINERS_TORCH, *TRAINERS, "-e", ".[test]", *SIBLINGS)
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
    session.install(DOCS_TORCH, "-e", ".[docs,test]", *SIBLINGS)
    session.env.pop("PYTHONPATH", None)
    session.run("mkdocs", "build", "--strict", "--site-dir", "site")
    tests = session.posargs or ("tests/test_docs_build.py",)
    session.run("python", "-m", "pytest", "-q", *tests, env={"HWRNG_DOCS_SITE": "site"})


#: Where ``nox -s wheels`` builds the distributions.
WHEELHOUSE = ".nox/wheelhouse"


@nox.session
def wheels(session: nox.Session) -> None:
    """Every distribution as a user and a vendor get it: built wheels, not editable installs.

    Builds the wheels (four distributions and the two example backends), then in this
    session's clean venv: the root wheel alone seeds on the CPU; with every wheel, ``hwrng
    backends`` names each backend's distribution, ``hwrng conformance --backend cpu`` and
    ``hwrng check`` pass, and so do the out-of-tree example backends' conformance runs.
    """
    import shutil

    shutil.rmtree(WHEELHOUSE, ignore_errors=True)
    # What the wheels need from the registry; the wheels themselves come from the wheelhouse
    # alone (--no-index), so that no release of the same name on the registry stands in.
    session.install(
        DOCS_TORCH, "numpy>=1.26", "pluggy>=1.5", "packaging>=22", "pytest>=8.0", "setuptools>=64"
    )
    session.install("wheel")
    for project in (".", "./conformance", "./backends/cuda", "./backends/npu", *EXAMPLES):
        session.run(
            "python",
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            WHEELHOUSE,
            project,
        )
    for project in (".", "conformance", "backends/cuda", "backends/npu", *EXAMPLES):
        shutil.rmtree(os.path.join(project, "build"), ignore_errors=True)  # setuptools' leftovers
    session.env.pop("PYTHONPATH", None)
    wheelhouse = os.path.abspath(WHEELHOUSE)
    session.chdir(session.create_tmp())  # nothing of the checkout on sys.path
    # a venv reused from an earlier run: none of ours installed before the root wheel alone
    ours = (
        "hwrng",
        "hwrng-cuda",
        "hwrng-npu",
        "hwrng-conformance",
        "hwrng-example-vcpu",
        "hwrng-example-nooffset",
    )
    session.run("python", "-m", "pip", "uninstall", "--yes", *ours)
    session.install("--no-index", "--find-links", wheelhouse, "hwrng")
    session.run("python", "-c", ALONE)
    session.install(
        "--no-index",
        "--find-links",
        wheelhouse,
        "hwrng[cuda,npu,conformance]",
        "hwrng-example-vcpu",
        "hwrng-example-nooffset",
    )
    session.run("python", "-c", "import hwrng, sys; print(hwrng.__file__)")
    session.run("hwrng", "backends")
    session.run("hwrng", "conformance", "--backend", "cpu", "--nproc", "2")
    session.run("hwrng", "conformance", "--backend", "vcpu", "--nproc", "2")
    session.run("hwrng", "conformance", "--backend", "nooffset", "--nproc", "2")
    session.run("hwrng", "check", "--nproc", "4")


#: The out-of-tree example backends, built and conformance-checked by ``nox -s wheels``: a
#: software device over CPU generators, and one whose generators have no offsets (OpenReg's kind).
EXAMPLES = ("examples/hwrng-example-vcpu", "examples/hwrng-example-nooffset")

#: What the root wheel alone must do: seed on the CPU, with no other distribution installed.
ALONE = """
import importlib.util, hwrng, torch
assert importlib.util.find_spec("hwrng_cuda") is None, "the root wheel alone"
seed = hwrng.manual_seed(1234, platform="cpu")
state = hwrng.state_dict()
print("hwrng", hwrng.__version__, "alone seeds:", seed, [p.name for p in hwrng.list_platforms()])
"""
