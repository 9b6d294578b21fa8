"""A step's output read into a verdict: pytest's summary, hwrng's result lines, a probe's figures.

Verdicts: ``passed``, ``failed`` (the step ran and reported a failure),
``partial`` (it ran and passed what it could, but left part out: the summary
says what), ``crashed`` (it stopped without a result: a traceback, a signal, an
exit status it never gives), ``timed out`` and ``not run`` (set by the runner).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERDICTS = ("passed", "failed", "partial", "crashed", "timed out", "not run")


@dataclass(frozen=True)
class Run:
    """What a step's subprocess left: its exit status, output, and the files it wrote."""

    returncode: int
    output: str
    figures_path: Path
    step_dir: Path
    rehearsal: bool


@dataclass(frozen=True)
class Outcome:
    """A step's verdict, a one-line summary, and its figures."""

    verdict: str
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)


def last_error(output: str) -> str:
    """The line that says why a process stopped: a traceback's last line, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b.*:", line) or line.startswith(
            ("Traceback", "Killed", "Segmentation fault")
        ):
            return line[:300]
    return lines[-1][:300] if lines else "no output"


def _ended(run: Run) -> str:
    if run.returncode < 0:
        return f"killed by signal {-run.returncode}"
    return f"exit status {run.returncode}"


def crashed(run: Run, why: str = "") -> Outcome:
    """The step stopped without a result it could report."""
    return Outcome("crashed", f"{why or 'no result'} ({_ended(run)}): {last_error(run.output)}")


_PYTEST_COUNT = re.compile(
    r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed|warnings?)"
)
_PYTEST_SKIP = re.compile(r"^SKIPPED \[(\d+)\] [^:]+:\d+: (.*)$", re.MULTILINE)
_NO_CUDA = "no CUDA device is visible"


def pytest_summary(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line (``3 passed, 1 skipped in 2.1s``)."""
    for line in reversed(output.splitlines()):
        if re.search(r" in [\d.]+s\b", line) and _PYTEST_COUNT.search(line):
            counts: dict[str, int] = {}
            for number, word in _PYTEST_COUNT.findall(line):
                key = {"error": "errors", "warning": "warnings"}.get(word, word)
                counts[key] = counts.get(key, 0) + int(number)
            return counts
    return {}


def skip_reasons(output: str) -> dict[str, int]:
    """How many tests each skip reason covered (pytest's ``-rs`` lines)."""
    reasons: dict[str, int] = {}
    for number, reason in _PYTEST_SKIP.findall(output):
        reasons[reason.strip()] = reasons.get(reason.strip(), 0) + int(number)
    return reasons


def from_pytest(run: Run) -> Outcome:
    """The verdict of a pytest run: its exit status and summary; on a GPU a CUDA skip fails."""
    counts = pytest_summary(run.output)
    reasons = skip_reasons(run.output)
    figures: dict[str, Any] = {"counts": counts, "skipped because": reasons}
    said = ", ".join(f"{n} {word}" for word, n in counts.items()) or "no summary"
    if run.returncode not in (0, 1, 5) or not counts:
        return crashed(run, "pytest gave no result")
    if run.returncode == 1:
        return Outcome("failed", said, figures)
    if run.returncode == 5 or not counts.get("passed"):
        return Outcome("failed", f"no test ran ({said})", figures)
    without_cuda = reasons.get(_NO_CUDA, 0)
    if without_cuda and not run.rehearsal:
        return Outcome(
            "failed", f"{without_cuda} test(s) skipped: {_NO_CUDA} to pytest ({said})", figures
        )
    return Outcome("passed", said, figures)


_CONFORMANCE = re.compile(
    r"^hwrng conformance: backend (\S+) (.+?) \((\d+) passed, (\d+) failed, (\d+) skipped.*$",
    re.MULTILINE,
)


def from_conformance(run: Run) -> Outcome:
    """``hwrng conformance``'s verdict line: CONFORMS passes, PARTIAL is partial."""
    found = _CONFORMANCE.findall(run.output)
    if not found:
        return crashed(run, "no verdict line")
    backend, verdict, passed, failed, skipped = found[-1]
    figures = {
        "backend": backend,
        "verdict": verdict,
        "passed": int(passed),
        "failed": int(failed),
        "skipped": int(skipped),
    }
    line = next(m.group(0) for m in _CONFORMANCE.finditer(run.output) if m.group(1) == backend)
    if verdict == "CONFORMS" and run.returncode == 0:
        return Outcome("passed", line.removeprefix("hwrng conformance: "), figures)
    if verdict.startswith("PARTIAL") and run.returncode == 0:
        return Outcome("partial", line.removeprefix("hwrng conformance: "), figures)
    return Outcome("failed", line.removeprefix("hwrng conformance: "), figures)


_CHECK = re.compile(r"^hwrng check: (PASSED|FAILED)\b.*$", re.MULTILINE)


def from_check(run: Run) -> Outcome:
    """``hwrng check``'s last line: PASSED (exit 0) or FAILED (exit 1); anything else crashed."""
    found = list(_CHECK.finditer(run.output))
    if not found or run.returncode not in (0, 1):
        return crashed(run, "no PASSED or FAILED line")
    line = found[-1].group(0).removeprefix("hwrng check: ")
    checks = re.search(r"\((\d+) checks?\)", line)
    figures = {"checks": int(checks.group(1))} if checks else {}
    ok = found[-1].group(1) == "PASSED" and run.returncode == 0
    return Outcome("passed" if ok else "failed", line, figures)


def from_probe(run: Run) -> Outcome:
    """The verdict, summary and figures a probe wrote (``_figures.write``)."""
    if not run.figures_path.is_file():
        return crashed(run, "the probe wrote no result")
    document = json.loads(run.figures_path.read_text(encoding="utf-8"))
    verdict = str(document.get("verdict"))
    if verdict not in ("passed", "failed", "partial"):
        return crashed(run, f"the probe wrote verdict {verdict!r}")
    summary = str(document.get("summary", ""))
    if run.returncode not in (0, 1):  # it wrote its result, then died (e.g. at interpreter exit)
        summary += f" (then {_ended(run)}: {last_error(run.output)})"
    return Outcome(verdict, summary, dict(document.get("figures", {})))


def from_benchmark(run: Run) -> Outcome:
    """``benchmarks/run.py``'s JSON results: every case timed, with its ratio to its baseline."""
    written = sorted(run.step_dir.glob("*.json"))
    if run.returncode != 0 or not written:
        return crashed(run, "benchmarks/run.py wrote no results")
    results = json.loads(written[-1].read_text(encoding="utf-8"))["results"]
    cases = [
        {
            "group": r["group"],
            "case": r["name"],
            "median_us": round(r["median_us"], 2),
            "ratio": None if r["ratio"] is None else round(r["ratio"], 3),
            "baseline": r["baseline"],
            "note": r["note"],
        }
        for r in results
    ]
    torchs = [c for c in cases if c["group"] == "DTensor region on one GPU"]
    ours = next((c for c in torchs if c["ratio"] is not None and c["median_us"]), None)
    if ours is not None:
        summary = (
            f"{len(cases)} cases; hwrng's region {ours['ratio']:.2f}x torch's "
            "OffsetBasedRNGTracker region"
        )
    elif run.rehearsal:
        summary = f"{len(cases)} cases; torch's OffsetBasedRNGTracker refuses a CPU mesh"
    else:
        return Outcome("failed", "no case against torch's OffsetBasedRNGTracker", {"cases": cases})
    return Outcome("passed", summary, {"cases": cases})
