"""Run each step in a subprocess of its own, within its budget and the run's, and judge it.

A step runs in a new session (its own process group) from the repository
root, its output (stdout and stderr) appended, as it comes, to
``OUT/steps.log`` under a line naming the step; the files it writes for the
report (its figures, the regions step's results) go to a folder of its own in
a temporary directory. So ``OUT`` holds three files whatever the steps, and
what a step printed is there even when the run itself is stopped. At its
budget the whole group is stopped -- SIGTERM, then SIGKILL -- ranks and
compile workers included, so one hang costs its budget and no more, and its
output so far is kept; a step that crashes, or needs a module that is missing,
gets its verdict and the next step runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from acceptance import outcomes
from acceptance._figures import FIGURES_ENV
from acceptance.steps import ROOT, Context, Step

#: How much of a step's output the report keeps.
TAIL_CHARS = 4000
#: How long a stopped step's processes get between SIGTERM and SIGKILL.
GRACE_S = 5.0
#: A step is not started with less than this left of the run's budget.
MIN_START_S = 5.0
#: The file under OUT that holds every step's whole output, in order.
STEPS_LOG = "steps.log"


@dataclass
class StepResult:
    """One step's record in the report."""

    name: str
    checks: str
    command: str
    budget_s: float
    verdict: str
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    tail: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Plain values for ``report.json``."""
        return asdict(self)


# A module is missing where it cannot be found, or where looking for it fails.
_FIND = """
import importlib.util, sys
def missing(name):
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True
print(*(name for name in sys.argv[1:] if missing(name)))
"""


def missing_modules(step: Step, python: str = sys.executable) -> list[str]:
    """The modules the step needs that ``python`` cannot import, as a new process finds them.

    A new process, not this one: the install step may have just installed them,
    editable, through ``.pth`` files that only a starting interpreter reads.
    """
    if not step.needs:
        return []
    done = subprocess.run(
        [python, "-c", _FIND, *step.needs], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return [f"(the module check failed: {outcomes.last_error(done.stderr)})"]
    return done.stdout.split()


def _group_alive(process: subprocess.Popen[bytes]) -> bool:
    process.poll()  # reap the leader once it exits: a zombie would still count
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop what is left of the step's process group: SIGTERM, a grace period, SIGKILL."""
    if _group_alive(process):
        os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and _group_alive(process):
            time.sleep(0.05)
        if _group_alive(process):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _output_since(log: Path, start: int) -> str:
    """What the log holds from byte ``start`` on: one step's output."""
    with log.open("rb") as source:
        source.seek(start)
        return source.read().decode("utf-8", errors="replace")


def _say(log: Path, line: str) -> int:
    """Append a line of the runner's own to the log; the log's size afterwards."""
    with log.open("ab") as sink:
        sink.write(f"{line}\n".encode())
        return sink.tell()


def run_step(step: Step, context: Context, step_dir: Path, log: Path, limit_s: float) -> StepResult:
    """Run ``step`` with at most ``limit_s`` seconds, and judge what it left.

    Its output is appended to ``log``; ``step_dir``, a new empty folder, takes
    the files it writes for the report.
    """
    record = StepResult(step.name, step.checks, step.shown(context), limit_s, "not run", "")
    missing = missing_modules(step, context.python)
    if missing:
        record.summary = f"not run: {', '.join(missing)} missing"
        _say(log, f"==== {step.name}: {record.summary}")
        return record
    step_dir.mkdir(parents=True)
    figures = step_dir / "figures.json"
    environment = {**os.environ, FIGURES_ENV: str(figures), "PYTHONUNBUFFERED": "1"}
    if context.rehearsal:
        environment["CUDA_VISIBLE_DEVICES"] = ""
        # one intra-op thread: on a shared CPU torch's threads wait on one another (a CPU
        # dropout of 64x1024 took 20 ms with two, 2.5 ms with one, at a load of 12)
        environment.setdefault("OMP_NUM_THREADS", "1")
    start = _say(log, f"==== {step.name} (budget {limit_s:.0f} s): {record.command}")
    started = time.monotonic()
    with log.open("ab") as sink:
        process = subprocess.Popen(
            step.command(context, step_dir),
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=environment,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=limit_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            returncode = -signal.SIGKILL
        finally:  # also on Ctrl-C: a step's ranks and workers never outlive it
            _stop_group(process)
    record.duration_s = round(time.monotonic() - started, 3)  # a fast step takes ms
    output = _output_since(log, start)
    record.tail = output[-TAIL_CHARS:]
    if timed_out:
        record.verdict = "timed out"
        record.summary = (
            f"stopped at its budget of {limit_s:.0f} s; last output: "
            f"{outcomes.last_error(record.tail)}"
        )
    else:
        run = outcomes.Run(returncode, output, figures, step_dir, context.rehearsal)
        _judge(step, run, record)
    _say(log, f"==== {step.name}: {record.verdict} in {record.duration_s:.1f} s")
    return record


def _judge(step: Step, run: outcomes.Run, record: StepResult) -> None:
    try:
        outcome = step.judge(run)
    except (ValueError, KeyError, TypeError) as error:  # a malformed result file
        outcome = outcomes.crashed(run, f"its result could not be read ({error})")
    record.verdict, record.summary, record.figures = (
        outcome.verdict,
        outcome.summary,
        outcome.figures,
    )


def run_all(
    steps: list[Step],
    context: Context,
    out: Path,
    total_s: float,
    progress: Callable[[str], None] = print,
    *,
    after_each: Callable[[list[StepResult]], None] | None = None,
) -> list[StepResult]:
    """Run the steps in order, each within its budget and what is left of ``total_s``.

    Both are scaled by ``context.budget_scale``. Every step's output goes to
    ``out/steps.log`` (made anew); ``after_each`` gets the results so far after
    each step (the run writes its report then, so a run stopped from outside
    leaves one).
    """
    out.mkdir(parents=True, exist_ok=True)
    log = out / STEPS_LOG
    log.write_bytes(b"")
    with tempfile.TemporaryDirectory(prefix="gpu-acceptance-") as work:
        return _run_all(
            steps, context, total_s, work=Path(work), log=log, progress=progress,
            after_each=after_each,
        )  # fmt: skip


def _run_all(
    steps: list[Step],
    context: Context,
    total_s: float,
    *,
    work: Path,
    log: Path,
    progress: Callable[[str], None],
    after_each: Callable[[list[StepResult]], None] | None,
) -> list[StepResult]:
    total_s *= context.budget_scale
    deadline = time.monotonic() + total_s
    results: list[StepResult] = []
    for step in steps:
        budget = step.budget_s * context.budget_scale
        left = deadline - time.monotonic()
        if left < MIN_START_S:
            record = StepResult(
                step.name,
                step.checks,
                step.shown(context),
                budget,
                "not run",
                f"not run: the run's budget of {total_s:.0f} s was spent",
            )
        else:
            progress(f"-- {step.name} (budget {min(budget, left):.0f} s): {step.shown(context)}")
            record = run_step(step, context, work / step.name, log, min(budget, left))
        said = (
            record.summary if record.verdict == "not run" else f"{record.verdict}: {record.summary}"
        )
        progress(f"   {said} ({record.duration_s:.1f} s)")
        results.append(record)
        if after_each is not None:
            after_each(results)
    return results
