"""The steps of the GPU acceptance run: what each runs and checks, and its time budget.

Every step is one subprocess started from the repository root with the
running Python. Its budget is its subprocess's timeout; the budgets add up to
at most :data:`TOTAL_BUDGET_S`, so the run fits in 8 minutes even when every
step uses all of its own. :data:`INSTALL` runs first where ``--install`` asks
for it (a GPU machine without a package index: the wheelhouse, then the
checkout). A rehearsal (``--rehearse``) runs each step's CPU analogue, with
three times the budgets: the same command with ``cpu`` for ``cuda`` (the CUDA tests
then skip), and the probes measure the CPU.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from acceptance import outcomes

#: The whole run's limit, in seconds: 8 minutes, less what the runner itself needs.
TOTAL_BUDGET_S = 470
#: A rehearsal's budgets are this many times the GPU's: its CPU analogues run on a CPU, often
#: shared (a CPU's dropout and inductor's C++ compiler are slower than the GPU's), and say
#: nothing of the GPU's timings anyway.
REHEARSAL_BUDGET_SCALE = 3.0
ROOT = Path(__file__).resolve().parents[2]
_PROBES = "benchmarks/acceptance"
_PYTEST = ["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]


@dataclass(frozen=True)
class Context:
    """Where and how the steps run.

    Attributes
    ----------
    device
        ``"cuda"``, or ``"cpu"`` in a rehearsal.
    rehearsal
        Whether this is a rehearsal on the CPU.
    bandwidth_log2
        The fill bandwidth's size: ``2**bandwidth_log2`` float32 values.
    budget_scale
        Every budget, the run's too, is multiplied by it
        (:data:`REHEARSAL_BUDGET_SCALE` in a rehearsal).
    python
        The interpreter that runs every step.
    """

    device: str
    rehearsal: bool
    bandwidth_log2: int = 26
    budget_scale: float = 1.0
    python: str = sys.executable


@dataclass(frozen=True)
class Step:
    """One step: its name, what it checks, its budget, what it needs, how to run and judge it.

    Attributes
    ----------
    name
        The step's name (``--only`` selects by it).
    checks
        What the step checks, in one sentence, for the report and ``--dry-run``.
    budget_s
        Its subprocess's timeout, in seconds.
    needs
        Modules the step cannot run without: where one is missing the step is not run.
    arguments
        The command's arguments after the interpreter, given the context and the
        directory the step may write to.
    judge
        Reads the step's output into its verdict.
    """

    name: str
    checks: str
    budget_s: int
    needs: tuple[str, ...]
    arguments: Callable[[Context, Path], list[str]]
    judge: Callable[[outcomes.Run], outcomes.Outcome]

    def command(self, context: Context, step_dir: Path) -> list[str]:
        """The whole command line, interpreter first."""
        return [context.python, *self.arguments(context, step_dir)]

    def shown(self, context: Context) -> str:
        """The command as a shell would read it, run from the repository root."""
        words = ["python3", *self.arguments(context, Path(f"OUT/steps/{self.name}"))]
        return " ".join(f'"{w}"' if " " in w else w for w in words)


def _probe(script: str, *extra: str) -> Callable[[Context, Path], list[str]]:
    def arguments(context: Context, step_dir: Path) -> list[str]:
        return [f"{_PROBES}/{script}", "--device", context.device, *extra]

    return arguments


def _bandwidth(context: Context, step_dir: Path) -> list[str]:
    return [
        f"{_PROBES}/bandwidth.py",
        "--device",
        context.device,
        "--log2",
        str(context.bandwidth_log2),
    ]


#: The first step where ``--install`` asks for it: pytest, setuptools and wheel from the
#: carried wheelhouse, then the checkout, editable -- all offline.
INSTALL = Step(
    "install",
    "pytest, setuptools and wheel from the wheelhouse --prepare made (.wheelhouse), then "
    "hwrng, hwrng-cuda and hwrng-conformance from the checkout, editable: offline, "
    "into the running Python",
    30,
    (),
    lambda context, step_dir: [f"{_PROBES}/install.py"],
    outcomes.from_probe,
)

STEPS: tuple[Step, ...] = (
    Step(
        "environment",
        "the device (name, SMs, memory), driver, CUDA, torch, Triton, pytest and hwrng's "
        "distributions and commit; hwrng imports and its cuda platform is available",
        15,
        (),
        _probe("probe_environment.py"),
        outcomes.from_probe,
    ),
    Step(
        "contract",
        "the invariant ops' known answers on the device by the fused kernel (int32 and int64 "
        "positions) and the generic path, the GPU equal to the CPU, the kernel's PTX "
        "IEEE-rounded (the parts of benchmarks/cuda_kernel_check.py, each in a process of its "
        "own, at once), and hwrng.invariant's public ops on the device equal to the CPU bit "
        "for bit",
        110,
        (),
        _probe("probe_contract.py"),
        outcomes.from_probe,
    ),
    Step(
        "cuda-tests",
        "the CUDA backend's tests and the fused kernel's GPU tests (backends/cuda/tests, "
        "tests/test_philox_triton.py; the graph tests are the graph step's; the Triton "
        "interpreter test is CI's CPU stand-in for this GPU and is left out)",
        55,
        ("pytest", "hwrng_cuda"),
        lambda context, step_dir: [
            *_PYTEST,
            "backends/cuda/tests",
            "tests/test_philox_triton.py",
            "-k",
            "not interpreter and not graph and not capture",
        ],
        outcomes.from_pytest,
    ),
    Step(
        "graph",
        "CUDA-graph capture and replay of forks and regions, a seed change during capture "
        "refused, and the graph-state registration gate (backends/cuda/tests/test_cuda.py, "
        "tests/test_graph_states.py)",
        25,
        ("pytest", "hwrng_cuda"),
        lambda context, step_dir: [
            *_PYTEST,
            "backends/cuda/tests/test_cuda.py",
            "tests/test_graph_states.py",
            "-k",
            "graph or capture",
        ],
        outcomes.from_pytest,
    ),
    Step(
        "conformance",
        "hwrng conformance --backend cuda: every rule of the conformance suite, the "
        "multi-process rules on 4 ranks",
        80,
        ("pytest", "hwrng_conformance"),
        lambda context, step_dir: ["-m", "hwrng", "conformance", "--backend", context.device],
        outcomes.from_conformance,
    ),
    Step(
        "check",
        "hwrng check --backend cuda --nproc 1: seeding, DTensor ops, a tensor-parallel "
        "model's initialisation and dropout, and hwrng.verify on one rank",
        30,
        (),
        lambda context, step_dir: [
            "-m",
            "hwrng",
            "check",
            "--backend",
            context.device,
            "--nproc",
            "1",
        ],
        outcomes.from_check,
    ),
    Step(
        "compile",
        "torch.compile (inductor) of DTensor random ops through hwrng's adapter and of "
        "hwrng.invariant's ops on a 1-rank mesh: compiled values equal eager's, bit for bit; "
        "DTensor invariant mode refuses compiled code, and torch 2.10 and 2.11's inductor "
        "is refused when the graph runs, both as docs/cuda-graphs-compile.md documents",
        65,
        (),
        _probe("probe_compile.py"),
        outcomes.from_probe,
    ),
    Step(
        "regions",
        "the cost of hwrng's tracked regions and forks against torch.random.fork_rng, a "
        "Megatron-style swap and torch's OffsetBasedRNGTracker region on a 1-GPU mesh, and no "
        "host-device sync in a region (benchmarks/run.py --quick --only regions)",
        30,
        (),
        lambda context, step_dir: [
            "benchmarks/run.py",
            "--device",
            context.device,
            "--quick",
            "--only",
            "regions",
            "--out",
            str(step_dir),
        ],
        outcomes.from_benchmark,
    ),
    Step(
        "bandwidth",
        "fill bandwidth of hwrng.invariant uniform_/normal_/dropout against torch's "
        "rand/randn/dropout, float32, 2**26 values, in GB/s and % of the card's peak "
        "(medians of CUDA events), beside a measured device-to-device copy",
        30,
        (),
        _bandwidth,
        outcomes.from_probe,
    ),
)


def select(names: list[str] | None, install: bool = False) -> list[Step]:
    """The steps named, in the run's order (all of them for ``None``), :data:`INSTALL` first.

    :data:`INSTALL` is one of them where ``install`` is true (``--install``).

    Raises
    ------
    ValueError
        For a name that is no step's.
    """
    every = (INSTALL, *STEPS) if install else STEPS
    if names is None:
        return list(every)
    known = [step.name for step in every]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"no step named {', '.join(unknown)}; the steps: {', '.join(known)}")
    return [step for step in every if step.name in names]
