"""Every CUDA claim of hwrng, checked by one command on a GPU machine, in at most 8 minutes.

Usage, from a checkout on a machine with a CUDA GPU and CUDA torch (>= hwrng's
floor), with nothing else to install::

    pip install --no-deps --no-build-isolation -e . -e backends/cuda -e conformance
    python3 benchmarks/gpu_acceptance.py --out benchmarks/results/gpu-acceptance-h100-2026-12-01

    python3 benchmarks/gpu_acceptance.py --dry-run     # the steps, on any machine
    python3 benchmarks/gpu_acceptance.py --rehearse --out /tmp/rehearsal   # CPU analogues

Each step (``acceptance/steps.py``) runs in a subprocess of its own with a time
budget; a step that fails, crashes, hangs or needs a missing module (pytest)
gets its verdict and the others still run. The run writes ``OUT/report.md``
and ``OUT/report.json`` (the machine, every step's verdict, figures, duration
and output tail, and the performance goals' verdicts) and each step's whole
output under ``OUT/steps/``. Exit status: 0 when every step passed, 1 when one
did not, 2 when the run cannot start (no CUDA device: use ``--dry-run`` or
``--rehearse``).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from acceptance import goals, report, runner, steps

EXIT_PASSED, EXIT_NOT_PASSED, EXIT_CANNOT_RUN = 0, 1, 2


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, help="the directory for report.md, report.json, steps/")
    parser.add_argument("--dry-run", action="store_true", help="list the steps and exit")
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
    args = parser.parse_args(argv)
    rehearsal = bool(args.rehearse)
    log2 = args.bandwidth_log2 or (20 if rehearsal else 26)
    scale = steps.REHEARSAL_BUDGET_SCALE if rehearsal else 1.0
    context = steps.Context("cpu" if rehearsal else "cuda", rehearsal, log2, scale)
    try:
        selected = steps.select(args.only)
    except ValueError as error:
        parser.error(str(error))
    if args.dry_run:
        print(dry_run(selected, context))
        return EXIT_PASSED
    if args.out is None:
        parser.error("--out DIR is required (except with --dry-run)")
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
    results = runner.run_all(selected, context, args.out, steps.TOTAL_BUDGET_S)
    bandwidth = next((r for r in results if r.name == "bandwidth"), None)
    judged = goals.judge(bandwidth, rehearsal)
    status = EXIT_PASSED if all(r.verdict == "passed" for r in results) else EXIT_NOT_PASSED
    info = report.RunInfo(
        command,
        started_at,
        round(time.monotonic() - started, 1),
        steps.TOTAL_BUDGET_S * scale,
        rehearsal,
        status,
    )
    figures = report.machine(results, _fallback_machine(rehearsal))
    markdown, as_json = report.write(args.out, info, figures, results, judged)
    for goal in judged:
        print(f"goal: {goal.verdict}: {goal.goal}")
    print(f"wrote {markdown} and {as_json.name}: {'PASSED' if status == 0 else 'NOT PASSED'}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
