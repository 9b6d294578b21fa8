"""``report.md`` and ``report.json``: the machine, every step's verdict and figures, the goals.

The JSON holds everything (each step's figures and the tail of its output);
the Markdown is the same for reading, meant to be committed under
``benchmarks/results/`` beside it. Both are written after every step, so a run
stopped from outside leaves a report that says how far it got.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acceptance.goals import Goal
from acceptance.runner import StepResult

#: The machine's figures the report's header shows, in order: (label, keys tried in turn).
HEADER = (
    ("device", ("device",)),
    ("SMs", ("SMs",)),
    ("compute capability", ("compute capability",)),
    ("memory (GiB)", ("memory GiB",)),
    ("driver", ("driver",)),
    ("CUDA", ("CUDA runtime (torch)",)),
    ("CUDA driver API", ("CUDA driver API",)),
    ("CPU", ("cpu",)),
    ("load average (1, 5, 15 min)", ("load average (1, 5, 15 min)",)),
    ("torch", ("torch version",)),
    ("triton", ("triton version",)),
    ("python", ("python",)),
    ("hwrng", ("hwrng version",)),
    ("hwrng commit", ("hwrng commit",)),
    ("hwrng's torch requirement", ("hwrng's torch floor",)),
    ("hwrng-cuda", ("hwrng-cuda version",)),
    ("hwrng-conformance", ("hwrng-conformance version",)),
    ("pytest", ("pytest version",)),
    ("hypothesis", ("hypothesis version",)),
    ("setuptools", ("setuptools version",)),
    ("date", ("date",)),
)


@dataclass(frozen=True)
class RunInfo:
    """How the run was made: its command, start, length, steps and result.

    ``exit_status`` is ``None`` while the run goes on (a report written after a
    step, before the last).
    """

    command: str
    started: str
    duration_s: float
    total_budget_s: float
    rehearsal: bool
    exit_status: int | None
    planned: int

    def result(self) -> str:
        """The run's one-word result: PASSED, NOT PASSED or INCOMPLETE."""
        if self.exit_status is None:
            return "INCOMPLETE"
        return "PASSED" if self.exit_status == 0 else "NOT PASSED"


def machine(results: list[StepResult], fallback: dict[str, Any]) -> dict[str, Any]:
    """The environment step's figures, over what the runner knows itself (``fallback``)."""
    found = next((r.figures for r in results if r.name == "environment" and r.figures), {})
    return {**fallback, **found}


def document(
    info: RunInfo, machine_figures: dict[str, Any], results: list[StepResult], goals: list[Goal]
) -> dict[str, Any]:
    """Everything, as ``report.json`` holds it."""
    return {
        "report": "hwrng GPU acceptance",
        "rehearsal": info.rehearsal,
        "command": info.command,
        "started": info.started,
        "duration_s": info.duration_s,
        "total_budget_s": info.total_budget_s,
        "exit_status": info.exit_status,
        "passed": info.exit_status == 0,
        "complete": info.exit_status is not None,
        "steps planned": info.planned,
        "machine": machine_figures,
        "steps": [r.as_dict() for r in results],
        "goals": [g.as_dict() for g in goals],
    }


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return " ".join(text.split()).replace("|", "\\|")


def _table(head: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return [*lines, ""]


def _bandwidth(step: StepResult) -> list[str]:
    figures = step.figures
    rows = []
    for op, o in figures["ops"].items():
        rows.append(
            [
                op,
                f"{o['hwrng ms']:.3f}",
                f"{o['torch op']} {o['torch ms']:.3f}",
                f"{o['ratio']:.2f}x",
                f"{o['hwrng GB/s']:,.1f}",
                "unknown" if o["hwrng % of peak"] is None else f"{o['hwrng % of peak']:.0f}%",
                f"{o['torch GB/s']:,.1f}",
                "unknown" if o["torch % of peak"] is None else f"{o['torch % of peak']:.0f}%",
            ]
        )
    peak = figures["peak GB/s"]
    lines = [
        "## Fill bandwidth",
        "",
        f"2**{figures['log2']} float32 values on {figures['device']}, median of "
        f"{figures['repeats']} ({figures['timer']}), same run; hwrng computes by "
        f"{figures['path']}. Peak: "
        + ("unknown" if peak is None else f"{peak:,.1f} GB/s, {figures['peak source']}")
        + f"; measured device-to-device copy: {figures['copy GB/s']:,.1f} GB/s.",
        "",
    ]
    head = ["op", "hwrng ms", "torch ms", "hwrng / torch", "hwrng GB/s", "% of peak"]
    return lines + _table([*head, "torch GB/s", "% of peak"], rows)


def _regions(step: StepResult) -> list[str]:
    rows = [
        [
            c["group"],
            c["case"],
            f"{c['median_us']:,.2f}",
            "" if c["ratio"] is None else f"{c['ratio']:.2f}x",
            c["note"],
        ]
        for c in step.figures["cases"]
    ]
    lines = [
        "## Region overhead",
        "",
        "Medians of `benchmarks/run.py --quick --only regions`, ratios to each group's first case.",
        "",
    ]
    return lines + _table(["group", "case", "median (us)", "ratio", "note"], rows)


def _contract(step: StepResult) -> list[str]:
    rows = [[name, p["status"], f"{p['seconds']:.1f}", p["found"]]
            for name, p in step.figures["parts"].items()]  # fmt: skip
    lines = [
        "## Contract",
        "",
        "The parts of `benchmarks/cuda_kernel_check.py`, each in a process of its own, at once "
        "(their time is mostly Triton compiling).",
        "",
    ]
    return lines + _table(["part", "status", "time (s)", "found"], rows)


def _compile(step: StepResult) -> list[str]:
    rows = [[name, r["outcome"], r["detail"]] for name, r in step.figures["cases"].items()]
    lines = [
        "## torch.compile",
        "",
        f"Backend `{step.figures['backend']}`, compiled against eager from the same seeding.",
        "",
    ]
    return lines + _table(["case", "outcome", "detail"], rows)


def markdown(
    info: RunInfo, machine_figures: dict[str, Any], results: list[StepResult], goals: list[Goal]
) -> str:
    """The report for reading."""
    device = machine_figures.get("device", "unknown device")
    date = str(machine_figures.get("date", info.started))[:10]
    passed = sum(r.verdict == "passed" for r in results)
    lines = [f"# hwrng GPU acceptance: {device}, {date}", ""]
    if info.rehearsal:
        lines += [
            "> **A rehearsal on the CPU: no GPU ran.** Every step ran its CPU analogue "
            "(the CUDA tests skip, the probes measure the CPU; what needs a CUDA device is "
            "said not run), to prove the run's machinery; nothing here is a figure or a "
            "verdict for CUDA.",
            "",
        ]
    stopped = (
        f" The run stopped (or is still running) after {len(results)} of {info.planned} steps."
        if info.exit_status is None
        else ""
    )
    lines += [
        f"Result: **{info.result()}** -- {passed} of {len(results)} steps passed, in "
        f"{info.duration_s:.0f} s (budget {info.total_budget_s:.0f} s).{stopped} Command: "
        f"`{info.command}`; started {info.started}.",
        "",
    ]
    header = []
    for label, keys in HEADER:
        value = next((machine_figures[k] for k in keys if k in machine_figures), None)
        if value is not None:
            header.append([label, value])
    lines += _table(["machine", ""], header)
    lines += ["## Verdicts", ""]
    lines += _table(
        ["step", "verdict", "summary", "time (s)", "budget (s)"],
        [
            [r.name, r.verdict, r.summary, f"{r.duration_s:.1f}", f"{r.budget_s:.0f}"]
            for r in results
        ],
    )
    lines += ["## Goals", ""]
    lines += _table(["goal", "verdict", "figures"], [[g.goal, g.verdict, g.detail] for g in goals])
    sections = {
        "contract": _contract,
        "bandwidth": _bandwidth,
        "regions": _regions,
        "compile": _compile,
    }
    for result in results:
        if result.name in sections and result.figures:
            lines += sections[result.name](result)
    lines += ["## Steps", ""]
    for result in results:
        lines += [
            f"### {result.name}: {result.verdict}",
            "",
            f"What it checks: {result.checks}.",
            "",
            f"Command: `{result.command}` (budget {result.budget_s:.0f} s, "
            f"ran {result.duration_s:.1f} s).",
            "",
            result.summary,
            "",
        ]
        if result.tail:
            fence = "````" if "```" in result.tail else "```"
            lines += [
                "<details><summary>output (tail)</summary>",
                "",
                fence + "text",
                result.tail.rstrip(),
                fence,
                "",
                "</details>",
                "",
            ]
    return "\n".join(lines).rstrip() + "\n"


def write(
    out: Path,
    info: RunInfo,
    machine_figures: dict[str, Any],
    results: list[StepResult],
    goals: list[Goal],
) -> tuple[Path, Path]:
    """Write ``out/report.md`` and ``out/report.json``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    as_json = out / "report.json"
    as_markdown = out / "report.md"
    as_json.write_text(
        json.dumps(document(info, machine_figures, results, goals), indent=1, default=str) + "\n",
        encoding="utf-8",
    )
    as_markdown.write_text(markdown(info, machine_figures, results, goals), encoding="utf-8")
    return as_markdown, as_json
