"""Per-rank cost of hwrng's checkpoint and verify against the world size (fake process group).

Usage::

    python3 benchmarks/bench_scale.py                      # worlds 256 .. 16,384
    python3 benchmarks/bench_scale.py --worlds 256,1024

Each world runs ``tests/scale_probe.py`` in a fresh interpreter: one rank of a
``(world / 8) x 8`` mesh, the other ranks simulated by torch's fake process
group. It records, per phase (save, load, verify, and the baseline of the same
run -- every rank gathering every rank's entry, as hwrng's layout 1 did), the
peak of Python allocations, the bytes handed to collectives and the time, and
the bytes of the saved entry; and how long DCP's coordinator takes to plan a
save of that many ranks with DCP's default save planner and with
``hwrng.RNGSavePlanner`` (a linear merge of the ranks' mappings). Writes
``benchmarks/results/scale-<date>.json`` and ``.md``, and the plot
``docs/img/scale.svg``. Nothing is asserted here: tests/test_scale.py asserts the bounds.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

from _timing import machine

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "scale_probe.py"
RESULTS = ROOT / "benchmarks" / "results"
PLOT = ROOT / "docs" / "img" / "scale.svg"
PHASES = ("save", "load", "verify", "gather_all")
LABELS = {
    "save": "save (RNGState.state_dict)",
    "load": "load (template + load_state_dict)",
    "verify": "hwrng.verify()",
    "gather_all": "baseline: every rank gathers every entry",
}
COLOURS = {"save": "#1f77b4", "load": "#2ca02c", "verify": "#9467bd", "gather_all": "#d62728"}


def probe(world: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(PROBE), str(world)], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def planning(world: int) -> dict[str, float]:
    """Seconds DCP's coordinator takes to plan a save of ``world`` ranks, by save planner."""
    import time

    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

    import hwrng

    hwrng.manual_seed(5, platform="cpu")
    entry = hwrng.RNGState().state_dict()

    def state(rank: int) -> dict[str, Any]:
        return {"rng": {"job": entry["job"], f"rank_{rank}": entry["rank_0"]}}

    local = []
    for rank in range(world):
        planner = DefaultSavePlanner()
        planner.set_up_planner(state(rank), is_coordinator=rank == 0)
        local.append(planner.create_local_plan())
    seconds = {}
    for kind in (DefaultSavePlanner, hwrng.RNGSavePlanner):
        planner = kind()
        planner.set_up_planner(state(0), is_coordinator=True)
        started = time.perf_counter()
        planner.create_global_plan(local)
        seconds[kind.__name__] = time.perf_counter() - started
    return seconds


def table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| world | entry (bytes) | phase | Python peak (KB) | collective bytes | collectives "
        "| time (ms) |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for run in runs:
        for phase in PHASES:
            cost = run[phase]
            lines.append(
                f"| {run['world']:,} | {run['entry_bytes']:,} | {LABELS[phase]} "
                f"| {cost['peak_bytes'] / 1024:,.1f} | {cost['collective_bytes']:,} "
                f"| {cost['collectives']} | {cost['seconds'] * 1000:,.2f} |"
            )
    return "\n".join(lines)


def _decimal_bytes(value: int) -> str:
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if value >= size:
            return f"{value // size} {unit}"
    return f"{value} B"


def svg(runs: list[dict[str, Any]]) -> str:
    """A log-log plot of the Python peak per rank against the world size, one line per phase."""
    width, height, left, right, top, bottom = 640, 360, 70, 230, 20, 50
    worlds = [r["world"] for r in runs]
    values = [r[p]["peak_bytes"] for r in runs for p in PHASES]
    xs = (math.log2(min(worlds)), math.log2(max(worlds)))
    ys = (math.floor(math.log10(min(values))), math.ceil(math.log10(max(values))))

    def x(world: float) -> float:
        span = (xs[1] - xs[0]) or 1
        return left + (math.log2(world) - xs[0]) / span * (width - left - right)

    def y(value: float) -> float:
        return top + (ys[1] - math.log10(value)) / (ys[1] - ys[0]) * (height - top - bottom)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for power in range(ys[0], ys[1] + 1):
        level = y(10**power)
        parts.append(
            f'<line x1="{left}" y1="{level:.1f}" x2="{width - right}" y2="{level:.1f}" '
            'stroke="#ddd"/>'
        )
        label = _decimal_bytes(10**power)
        parts.append(f'<text x="{left - 6}" y="{level + 4:.1f}" text-anchor="end">{label}</text>')
    for world in worlds:
        parts.append(
            f'<text x="{x(world):.1f}" y="{height - bottom + 16}" text-anchor="middle">'
            f"{world:,}</text>"
        )
    parts.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 10}" text-anchor="middle">'
        "ranks in the world (one rank simulated)</text>"
    )
    for row, phase in enumerate(PHASES):
        points = " ".join(f"{x(r['world']):.1f},{y(r[phase]['peak_bytes']):.1f}" for r in runs)
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{COLOURS[phase]}" stroke-width="2"/>'
        )
        key = top + 14 + row * 18
        parts.append(
            f'<line x1="{width - right + 10}" y1="{key - 4}" x2="{width - right + 30}" '
            f'y2="{key - 4}" stroke="{COLOURS[phase]}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{width - right + 34}" y="{key}">{LABELS[phase]}</text>')
    parts.append(
        f'<text x="{left}" y="{top - 6}">Python allocations at their peak, per rank</text>'
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worlds", default="256,1024,4096,16384", help="comma-separated")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    parser.add_argument("--plot", type=Path, default=PLOT, help="where to write the SVG plot")
    args = parser.parse_args(argv)
    runs = []
    for world in (int(w) for w in args.worlds.split(",")):
        print(f"-- {world:,} ranks", flush=True)
        runs.append(probe(world))
        for phase in PHASES:
            cost = runs[-1][phase]
            print(
                f"   {LABELS[phase]:42} peak {cost['peak_bytes'] / 1024:12,.1f} KB  "
                f"collectives {cost['collective_bytes']:14,} B"
            )
    plans = {}
    for run in runs:
        plans[run["world"]] = planning(run["world"])
        print(
            f"   planning {run['world']:,} ranks: "
            + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in plans[run["world"]].items())
        )
    header = {"device": "cpu (fake process group)", **machine()}
    stem = f"scale-{header['date']}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(
        json.dumps({"machine": header, "runs": runs, "planning": plans}, indent=1) + "\n",
        encoding="utf-8",
    )
    lines = [f"# hwrng per-rank cost at scale: {header['date']}", ""]
    lines += [f"- {key}: {value}" for key, value in header.items()]
    lines += ["- command: `python3 benchmarks/bench_scale.py`", "", table(runs), ""]
    lines += [
        "DCP's coordinator planning a save (one entry per rank and a shared one), seconds:",
        "",
        "| world | DefaultSavePlanner | hwrng.RNGSavePlanner | ratio |",
        "|---:|---:|---:|---:|",
    ]
    for world, seconds in plans.items():
        default, linear = seconds["DefaultSavePlanner"], seconds["RNGSavePlanner"]
        lines.append(f"| {world:,} | {default:.2f} | {linear:.2f} | {default / linear:.0f}x |")
    (args.out / f"{stem}.md").write_text("\n".join(lines), encoding="utf-8")
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    args.plot.write_text(svg(runs), encoding="utf-8")
    print(f"wrote {args.out / stem}.md and .json, and {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
