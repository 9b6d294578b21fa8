"""Run every benchmark and write its results, with the machine, to ``benchmarks/results/``.

Usage::

    python3 benchmarks/run.py                   # the selected platform's device
    python3 benchmarks/run.py --device cuda     # a named hwrng platform
    python3 benchmarks/run.py --quick           # fewer samples, for a smoke run
    python3 benchmarks/run.py --only regions    # one module (regions, recompute, ...)

Each case is timed as the median, over interleaved samples, of the mean time
of many calls; its ratio is to a baseline measured in the same run on the
same machine. Nothing here asserts a time: the figures are for reading.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from _timing import Result, command_line, machine, write_results

import hwrng

MODULES = ("regions", "seed_plan", "seeding", "invariant", "model", "recompute", "compile")
RESULTS = Path(__file__).resolve().parent / "results"


def render(header: dict[str, str], results: list[Result], command: str) -> str:
    """The results as a Markdown page: a header, then one table per group."""
    lines = [f"# hwrng benchmarks: {header['device']}", ""]
    lines += [f"- {key}: {value}" for key, value in header.items()]
    lines += [f"- command: `{command}`", ""]
    group = None
    for result in results:
        if result.group != group:
            group = result.group
            lines += ["", f"## {group}", ""]
            lines += [
                "| case | median (us) | IQR (us) | ratio | note |",
                "|---|---:|---:|---:|---|",
            ]
        ratio = "baseline" if result.baseline is None else f"{result.ratio:.2f}x"
        lines.append(
            f"| {result.name} | {result.median_us:,.1f} | {result.spread_us:,.1f} | {ratio} "
            f"| {result.note} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", help="hwrng platform name (default: the selected one)")
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--only", choices=MODULES, action="append", help="run only these")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args(argv)
    platform = hwrng.get_platform(args.device)
    header = {"device": platform.name, **machine()}
    results: list[Result] = []
    for name in args.only or MODULES:
        print(f"-- {name}", flush=True)
        module = importlib.import_module(f"bench_{name}")
        for result in module.run(platform, args.quick):
            ratio = "" if result.ratio is None else f"  {result.ratio:6.2f}x"
            label = f"{result.group[:40]:40} {result.name[:48]:48}"
            print(f"{label} {result.median_us:12,.1f} us{ratio}")
            results.append(result)
    stem = f"{platform.name}-{header['date']}" + ("-quick" if args.quick else "")
    write_results(
        args.out,
        stem,
        render(header, results, command_line("run.py", argv)),
        {"machine": header, "results": [r.as_dict() for r in results]},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
