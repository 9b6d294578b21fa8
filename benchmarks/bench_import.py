"""What ``import hwrng`` costs on top of ``import torch``, each in a fresh interpreter.

Every rank of every job and every ``hwrng`` command pays it. Each sample starts a
new Python process that times, inside itself, ``import torch`` alone (the
baseline) or ``import torch; import hwrng`` (and, if asked, a command's whole
run); the cases alternate sample by sample so the machine's drift hits all
alike. The ratio is the medians' (the goal: at most 1.2x). The first
sample of each case is a warm-up, left out: it fills the file cache and writes
the bytecode of whatever has none yet (the children run with Python's default
bytecode cache, ``PYTHONDONTWRITEBYTECODE`` removed, as an installed hwrng has
its ``.pyc`` files; a source checkout without them compiles hwrng's modules at
every import, about 0.15 s more).

Usage::

    python3 benchmarks/bench_import.py                    # 9 samples of each case
    python3 benchmarks/bench_import.py --samples 15 --commands
    python3 benchmarks/bench_import.py --out benchmarks/results --name cpu-DATE-import

``--commands`` adds ``python3 -m hwrng plan ...`` and ``python3 -m hwrng backends``,
timed from the interpreter's start to its exit (so with Python's own start-up,
against ``python3 -c "import torch"`` timed the same way).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _timing import command_line, machine, write_results

#: Timed inside the child: the imports alone, from before ``import torch``.
_INSIDE = "import time; t = time.perf_counter(); {imports}; print(time.perf_counter() - t)"
IMPORTS = {"import torch": "import torch", "import torch; import hwrng": "import torch, hwrng"}
BASELINE = "import torch"
#: Timed from outside: the whole process, start-up and exit included.
COMMANDS = {
    "python3 -c 'import torch'": ["-c", "import torch"],
    "hwrng plan --mesh dp=2,tp=2 --sharded tp --seed 1": [
        "-m",
        "hwrng",
        "plan",
        "--mesh",
        "dp=2,tp=2",
        "--sharded",
        "tp",
        "--seed",
        "1",
    ],
    "hwrng backends": ["-m", "hwrng", "backends"],
}
COMMAND_BASELINE = "python3 -c 'import torch'"


#: The children's environment: bytecode read from, and written to, ``__pycache__``.
_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def _inside(imports: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _INSIDE.format(imports=imports)],
        capture_output=True,
        text=True,
        check=True,
        env=_ENV,
    ).stdout
    return float(out.split()[-1])


def _outside(arguments: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *arguments], capture_output=True, check=True, env=_ENV)
    return time.perf_counter() - start


def _summary(times: dict[str, list[float]], baseline: str) -> list[dict[str, Any]]:
    base = statistics.median(times[baseline])
    rows = []
    for name, values in times.items():
        quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
        median = statistics.median(values)
        rows.append(
            {
                "case": name,
                "median_s": median,
                "spread_s": quartiles[2] - quartiles[0],
                "samples": len(values),
                "ratio": median / base,
            }
        )
    return rows


def measure(samples: int, commands: bool) -> dict[str, Any]:
    """Every case ``samples`` times (after one warm-up each), interleaved; medians and ratios."""
    load_before = os.getloadavg()[0]
    imports: dict[str, list[float]] = {name: [] for name in IMPORTS}
    runs: dict[str, list[float]] = {name: [] for name in COMMANDS} if commands else {}
    for sample in range(samples + 1):
        for name, code in IMPORTS.items():
            seconds = _inside(code)
            if sample:
                imports[name].append(seconds)
        for name, arguments in COMMANDS.items() if commands else ():
            seconds = _outside(arguments)
            if sample:
                runs[name].append(seconds)
        print(f"sample {sample}/{samples} (load {os.getloadavg()[0]:.1f})", flush=True)
    return {
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "imports": _summary(imports, BASELINE),
        "commands": _summary(runs, COMMAND_BASELINE) if commands else [],
    }


def render(header: dict[str, str], result: dict[str, Any], command: str) -> str:
    """The result as a Markdown page: the machine, the load, one table per kind of timing."""
    lines = ["# `import hwrng` against `import torch`, fresh interpreters", ""]
    lines += [f"- {key}: {value}" for key, value in header.items()]
    lines += [
        f"- command: `{command}`",
        f"- load (1-minute average): {result['load_before']:.2f} before, "
        f"{result['load_after']:.2f} after",
        "",
    ]
    tables = [("Imports, timed inside the process", "imports")]
    if result["commands"]:
        tables.append(("Commands, the whole process from outside", "commands"))
    for title, key in tables:
        lines += [f"## {title}", "", "| case | median (s) | IQR (s) | samples | ratio |"]
        lines += ["|---|---:|---:|---:|---:|"]
        lines += [
            f"| `{row['case']}` | {row['median_s']:.3f} | {row['spread_s']:.3f} "
            f"| {row['samples']} | {row['ratio']:.2f}x |"
            for row in result[key]
        ]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=9)
    parser.add_argument("--commands", action="store_true", help="also time hwrng plan/backends")
    parser.add_argument("--out", type=Path, help="write NAME.md and NAME.json here")
    parser.add_argument("--name", default=None, help="the results' file name (no suffix)")
    args = parser.parse_args(argv)
    result = measure(args.samples, args.commands)
    for row in result["imports"] + result["commands"]:
        print(f"{row['case']:52} {row['median_s']:7.3f} s  {row['ratio']:.2f}x")
    if args.out:
        header = {"device": "cpu", **machine()}
        name = args.name or f"cpu-{header['date']}-import"
        markdown = render(header, result, command_line("bench_import.py", argv))
        write_results(args.out, name, markdown, {"machine": header, **result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
