"""The host-generator hot path of two source trees of hwrng, timed alternately in one run.

Usage::

    python3 benchmarks/compare_trees.py --baseline /path/to/other/checkout [--rounds 3]

Each round times, in a fresh interpreter per tree (the baseline's ``hwrng`` first on
``sys.path``, then this checkout's), what every seeding, fork and region does on the
CPU: reading and writing the host generator's position, claiming it, ``manual_seed``,
``fork_rng``, a tracked region and a named-state fork, with ``torch.random.fork_rng``
as each interpreter's own baseline. Trees alternate round by round, so drift and load
hit both alike; the table gives each case's median over rounds for both trees and the
ratio of this checkout to the baseline tree, each case first divided by its own
interpreter's ``torch.random.fork_rng`` (so that a round run under heavier load does not
count against one tree), as the median over rounds. Written to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: Run in each tree's interpreter: one JSON line of {case: median us}.
PROBE = """
import json, sys
import torch
from torch.distributed.tensor import Replicate
import hwrng
from _timing import measure

platform = hwrng.get_platform("cpu")
host = torch.default_generator
user = torch.Generator()
platform.set_seed_offset(user, 1, 0)
tracker = hwrng.OffsetTracker(platform)
states = hwrng.RNGStatesTracker(platform, name="compare")
states.add("model-parallel-rng", 5)
spec = hwrng.ShardSpec((64, 64), (1,), (Replicate(),), (0,))


def read_and_write():
    seed, offset = platform.get_seed_offset(host)
    platform.set_seed_offset(host, seed, offset + 4)


def torch_fork():
    with torch.random.fork_rng(devices=[]):
        pass


def region():
    with tracker.region(spec):
        pass


def region_user_generator():
    with tracker.region(spec, user):
        pass


def fork():
    with hwrng.fork_rng():
        pass


def named_fork():
    with states.fork():
        pass


results = measure(
    "host generator",
    {
        "torch.random.fork_rng": torch_fork,
        "read and write the host position": read_and_write,
        "manual_seed(platform='cpu')": lambda: hwrng.manual_seed(1, platform="cpu"),
        "hwrng.fork_rng": fork,
        "OffsetTracker region, default generator": region,
        "OffsetTracker region, user generator": region_user_generator,
        "RNGStatesTracker.fork": named_fork,
    },
    baseline="torch.random.fork_rng",
    inner=int(sys.argv[1]),
    samples=int(sys.argv[2]),
)
print(json.dumps({"hwrng": hwrng.__file__, **{r.name: r.median_us for r in results}}))
"""


def probe(tree: Path, inner: int, samples: int) -> dict[str, float]:
    """One interpreter's medians, with ``tree``'s hwrng imported."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(HERE)])}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(inner), str(samples)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=HERE,
    )
    if done.returncode:
        raise SystemExit(f"the probe failed in {tree}:\n{done.stderr[-3000:]}")
    answer: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    found = Path(str(answer.pop("hwrng"))).resolve()
    if not found.is_relative_to(tree.resolve()):
        raise SystemExit(f"the probe imported {found}, not the tree {tree}")
    return answer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inner", type=int, default=300)
    parser.add_argument("--samples", type=int, default=9)
    parser.add_argument("--label", default="baseline", help="the baseline tree's name")
    parser.add_argument("--note", default="", help="the load the machine was under")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from _timing import machine

    rounds: dict[str, list[dict[str, float]]] = {"baseline": [], "this": []}
    for number in range(args.rounds):
        for name, tree in (("baseline", args.baseline), ("this", ROOT)):
            rounds[name].append(probe(tree, args.inner, args.samples))
            print(f"round {number + 1}/{args.rounds}: {name} done", flush=True)
    cases = list(rounds["this"][0])
    header = machine()
    lines = [
        f"# The host-generator hot path: this checkout against {args.label}",
        "",
        *[f"- {key}: {value}" for key, value in header.items()],
        f"- rounds: {args.rounds} (trees alternating), {args.samples} samples of "
        f"{args.inner} calls per case and round",
        *([f"- load: {args.note}"] if args.note else []),
        f"- command: `python3 benchmarks/compare_trees.py --baseline <{args.label}> "
        f"--rounds {args.rounds} --inner {args.inner} --samples {args.samples}`",
        "",
        f"| case | {args.label} (us) | this (us) | this / {args.label}, each per its "
        "torch.random.fork_rng |",
        "|---|---:|---:|---:|",
    ]
    summary = {}
    own = "torch.random.fork_rng"
    for case in cases:
        base = statistics.median(r[case] for r in rounds["baseline"])
        this = statistics.median(r[case] for r in rounds["this"])
        ratio = statistics.median(
            (t[case] / t[own]) / (b[case] / b[own])
            for t, b in zip(rounds["this"], rounds["baseline"], strict=True)
        )
        summary[case] = {"baseline_us": base, "this_us": this, "ratio": ratio}
        lines.append(f"| {case} | {base:,.1f} | {this:,.1f} | {ratio:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"host-hot-path-{header['date']}"
    (args.out / f"{stem}.md").write_text(text, encoding="utf-8")
    (args.out / f"{stem}.json").write_text(
        json.dumps({"machine": header, "rounds": rounds, "summary": summary}, indent=1) + "\n",
        encoding="utf-8",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
