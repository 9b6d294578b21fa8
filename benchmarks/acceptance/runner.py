"""Run each step in a subprocess of its own, within its budget and the run's, and judge it.

A step runs in a new session (its own process group) from the repository
root, its output (stdout and stderr) into ``OUT/steps/NAME/output.log``. At its
budget the whole group is stopped -- SIGTERM, then SIGKILL -- ranks and
compile workers included, so one hang costs its budget and no more; a step
that crashes, or needs a module that is missing, gets its verdict and the next
step runs.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
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


def missing_modules(step: Step) -> list[str]:
    """The modules the step needs that this interpreter cannot import."""
    return [name for name in step.needs if importlib.util.find_spec(name) is None]


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


def _tail(log: Path) -> str:
    text = log.read_text(encoding="utf-8", errors="replace")
    return text[-TAIL_CHARS:]


def run_step(step: Step, context: Context, out: Path, limit_s: float) -> StepResult:
    """Run ``step`` with at most ``limit_s`` seconds, and judge what it left."""
    step_dir = out / "steps" / step.name
    record = StepResult(step.name, step.checks, step.shown(context), limit_s, "not run", "")
    missing = missing_modules(step)
    if missing:
        record.summary = f"not run: {', '.join(missing)} missing"
        return record
    shutil.rmtree(step_dir, ignore_errors=True)  # nothing of an earlier run is read as this one's
    step_dir.mkdir(parents=True)
    figures = step_dir / "figures.json"
    environment = {**os.environ, FIGURES_ENV: str(figures), "PYTHONUNBUFFERED": "1"}
    if context.rehearsal:
        environment["CUDA_VISIBLE_DEVICES"] = ""
    log = step_dir / "output.log"
    started = time.monotonic()
    with log.open("wb") as sink:
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
    record.tail = _tail(log)
    if timed_out:
        record.verdict = "timed out"
        record.summary = (
            f"stopped at its budget of {limit_s:.0f} s; last output: "
            f"{outcomes.last_error(record.tail)}"
        )
        return record
    run = outcomes.Run(
        returncode, log.read_text("utf-8", "replace"), figures, step_dir, context.rehearsal
    )
    try:
        outcome = step.judge(run)
    except (ValueError, KeyError, TypeError) as error:  # a malformed result file
        outcome = outcomes.crashed(run, f"its result could not be read ({error})")
    record.verdict, record.summary, record.figures = (
        outcome.verdict,
        outcome.summary,
        outcome.figures,
    )
    return record


def run_all(
    steps: list[Step],
    context: Context,
    out: Path,
    total_s: float,
    progress: Callable[[str], None] = print,
) -> list[StepResult]:
    """Run the steps in order, each within its budget and what is left of ``total_s``.

    Both are scaled by ``context.budget_scale``.
    """
    total_s *= context.budget_scale
    deadline = time.monotonic() + total_s
    results = []
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
            record = run_step(step, context, out, min(budget, left))
        said = (
            record.summary if record.verdict == "not run" else f"{record.verdict}: {record.summary}"
        )
        progress(f"   {said} ({record.duration_s:.1f} s)")
        results.append(record)
    return results
