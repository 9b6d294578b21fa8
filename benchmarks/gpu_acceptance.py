"""Every CUDA claim of hwrng, checked by one command on a GPU machine, in at most 8 minutes.

Usage. Here, where pip reaches a package index, in the checkout the GPU machine
gets a copy of, after its last commit::

    python3 benchmarks/gpu_acceptance.py --prepare

builds .wheelhouse/ (pure-Python wheels of pytest and what it needs,
setuptools and wheel; ignored by git) and records the commit in it. On the
GPU machine, from the copy's root, with no package index, the one command::

    python3 benchmarks/gpu_acceptance.py --install --out "$OUT/gpu-acceptance"

(the device tool: that as `command`, carry [".wheelhouse"], timeout_s 540).
--install first installs the wheelhouse and then the checkout, editable,
offline; without --install the machine must have them (pytest; `pip install
--no-deps --no-build-isolation -e . -e backends/cuda -e conformance`).
--out defaults to $OUT/gpu-acceptance where $OUT is set.

    python3 benchmarks/gpu_acceptance.py --dry-run     # the steps, on any machine
    python3 benchmarks/gpu_acceptance.py --rehearse --out /tmp/rehearsal   # CPU analogues

Each step (``acceptance/steps.py``) runs in a subprocess of its own with a time
budget; a step that fails, crashes, hangs or needs a missing module (pytest)
gets its verdict and the others still run. The run writes three files,
``OUT/report.md`` and ``OUT/report.json`` (the machine, the commit, every
step's verdict, figures, duration and output tail, and the performance goals'
verdicts; rewritten after each step) and ``OUT/steps.log`` (every step's whole
output). Exit status: 0 when every step passed, 1 when one did not, 2 when the
run cannot start (no CUDA device: use ``--dry-run`` or ``--rehearse``; or
``--prepare`` failed).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from acceptance import goals, report, runner, steps, wheelhouse

EXIT_PASSED, EXIT_NOT_PASSED, EXIT_CANNOT_RUN = 0, 1, 2
#: The folder under ``$OUT`` the run writes to by default.
OUT_NAME = "gpu-acceptance"


def dry_run(selected: list[steps.Step], context: steps.Context) -> str:
    """The steps: name, budget, what each runs and checks, and any module it needs."""
    lines = [
        f"hwrng GPU acceptance: {len(selected)} steps, each in its own subprocess, "
        f"budgets {sum(s.budget_s for s in selected)} s in all (the run stops at "
        f"{steps.TOTAL_BUDGET_S} s)",
        "",
    ]
    for step in selected:
        missing = runner.missing_modules(step)
        needs = f"; needs {', '.join(step.needs)}" if step.needs else ""
        here = f" ({', '.join(missing)} missing here: it would not run)" if missing else ""
        lines += [
            f"{step.name:12} {step.budget_s:4d} s  {step.shown(context)}",
            f"{'':19}checks {step.checks}{needs}{here}",
        ]
    return "\n".join(lines)


def _why_no_cuda() -> str | None:
    """Why this machine cannot run the acceptance, or None when a CUDA device is visible."""
    try:
        import torch
    except ImportError as error:
        return f"torch cannot be imported ({error})"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a build without CUDA"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
    return None


def _fallback_machine(rehearsal: bool) -> dict[str, Any]:
    """What the runner knows itself, should the environment step give nothing."""
    import torch

    return {
        "device": "CPU (a rehearsal)" if rehearsal else "unknown (the environment step failed)",
        "torch version": torch.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def out_folder(given: Path | None, environment: dict[str, str]) -> tuple[Path | None, str | None]:
    """The folder the run writes to, and a warning where it will not come back from a device.

    ``--out`` where given, else ``$OUT/gpu-acceptance`` where ``$OUT`` is set (the device
    tool's folder: only what lies under it comes back), else none.
    """
    home = environment.get("OUT")
    if given is None:
        return (Path(home) / OUT_NAME if home else None), None
    if home and not given.resolve().is_relative_to(Path(home).resolve()):
        return given, (
            f"warning: --out {given} is not under $OUT ({home}): on a device machine only "
            f"what lies under $OUT comes back (use --out $OUT/{OUT_NAME})"
        )
    return given, None


def _prepare() -> int:
    try:
        done = wheelhouse.prepare(steps.ROOT)
    except RuntimeError as error:
        print(f"gpu_acceptance --prepare: {error}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    print(wheelhouse.summary(done))
    return EXIT_PASSED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "on a GPU machine without a package index (the device tool), after --prepare here:\n"
            f"  command:   {wheelhouse.DEVICE_COMMAND}\n"
            f"  carry:     {list(wheelhouse.CARRY)}\n"
            "  timeout_s: 540 (the run stops its steps at "
            f"{steps.TOTAL_BUDGET_S} s)\n"
            "docs/benchmarks.md#gpu-acceptance says more."
        ),
    )
    parser.add_argument(
        "--out",
        type=Path,
        help=f"the directory for report.md, report.json, steps.log (default: $OUT/{OUT_NAME} "
        "where $OUT is set)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list the steps and exit")
    parser.add_argument(
        "--prepare",
        action="store_true",
        help=f"build {wheelhouse.WHEELHOUSE}/ (needs a package index) and record the commit "
        "in it, then exit",
    )
    parser.add_argument(
        "--install",
        action="store_true",
        help=f"first install {wheelhouse.WHEELHOUSE}/ and then this checkout (editable), "
        "offline, into this Python",
    )
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="run every step's CPU analogue (no GPU needed): proves the machinery, not CUDA",
    )
    parser.add_argument("--only", nargs="+", metavar="STEP", help="run only these steps")
    parser.add_argument(
        "--bandwidth-log2",
        type=int,
        default=None,
        help="the bandwidth step's size, 2**N float32 values (default 26; 20 in a rehearsal)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.prepare:
        return _prepare()
    rehearsal = bool(args.rehearse)
    log2 = args.bandwidth_log2 or (20 if rehearsal else 26)
    scale = steps.REHEARSAL_BUDGET_SCALE if rehearsal else 1.0
    context = steps.Context("cpu" if rehearsal else "cuda", rehearsal, log2, scale)
    try:
        selected = steps.select(args.only, install=args.install)
    except ValueError as error:
        parser.error(str(error))
    if args.dry_run:
        print(dry_run(selected, context))
        return EXIT_PASSED
    out, warning = out_folder(args.out, dict(os.environ))
    if out is None:
        parser.error("--out DIR is required (except with --dry-run, or where $OUT is set)")
    if warning:
        print(warning, file=sys.stderr)
    if not rehearsal:
        why = _why_no_cuda()
        if why is not None:
            print(
                f"gpu_acceptance: cannot run: {why}. Run it on a machine with a CUDA GPU; "
                "--dry-run lists the steps, --rehearse runs their CPU analogues.",
                file=sys.stderr,
            )
            return EXIT_CANNOT_RUN
    started_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    started = time.monotonic()
    command = shlex.join(
        ["python3", "benchmarks/gpu_acceptance.py", *(argv if argv is not None else sys.argv[1:])]
    )

    def write(results: list[runner.StepResult], status: int | None) -> Path:
        bandwidth = next((r for r in results if r.name == "bandwidth"), None)
        judged = goals.judge(bandwidth, rehearsal)
        info = report.RunInfo(
            command,
            started_at,
            round(time.monotonic() - started, 1),
            steps.TOTAL_BUDGET_S * scale,
            rehearsal,
            status,
            len(selected),
        )
        figures = report.machine(results, _fallback_machine(rehearsal))
        return report.write(out, info, figures, results, judged)[0]

    results = runner.run_all(
        selected,
        context,
        out,
        steps.TOTAL_BUDGET_S,
        after_each=lambda so_far: write(so_far, None),
    )
    status = EXIT_PASSED if all(r.verdict == "passed" for r in results) else EXIT_NOT_PASSED
    markdown = write(results, status)
    bandwidth = next((r for r in results if r.name == "bandwidth"), None)
    for goal in goals.judge(bandwidth, rehearsal):
        print(f"goal: {goal.verdict}: {goal.goal}")
    said = "PASSED" if status == 0 else "NOT PASSED"
    print(f"wrote {markdown}, report.json and {runner.STEPS_LOG}: {said}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
