"""Judge runs of train.py by their records, and draw their loss curves.

::

    python3 compare.py exact runs/straight runs/resumed   # bit for bit, or exit 1
    python3 compare.py layout runs/straight runs/layout   # masks, weights equal; losses close
    python3 compare.py off runs/straight runs/off runs/off-resumed   # what differs, measured
    python3 compare.py plot --png loss.png runs/straight runs/resumed ... runs/off ...

Each run's folder holds one ``launch-<n>.jsonl`` per launch (a killed launch and its
resume are two); a step recorded by several launches is taken from the last.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The losses of a run resumed on another layout may differ from the straight run's by
#: the order of reductions alone (TP matmuls' partial sums, FSDP's gradient reduce-scatter,
#: the loss's mean over dp): a relative difference of at most this. Measured: at most one
#: float32 ulp of the loss (8.5e-8 relative) over steps 16 to 30 on dp4 x tp1 and dp1 x tp4
#: (README). Masks drawn one position off moved it by 8.8e-4 to 1.9e-3.
NOISE_BOUND = 1e-6


@dataclass
class Run:
    """What the launches of one run's folder recorded."""

    folder: Path
    launches: list[list[dict[str, Any]]]
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for launch in self.launches:
            for record in launch:
                if record["event"] == "step":
                    self.steps[record["step"]] = record

    @property
    def first(self) -> dict[str, Any]:
        """The first launch's start record."""
        return self.launches[0][0]

    @property
    def last(self) -> dict[str, Any]:
        """The last launch's start record."""
        return self.launches[-1][0]

    @property
    def end(self) -> dict[str, Any] | None:
        """The end record of the last launch, if it finished."""
        tail = self.launches[-1][-1]
        return tail if tail["event"] == "end" else None

    @property
    def resumed_at(self) -> int:
        """The step the last launch started from (0 if it did not resume)."""
        return int(self.last["step"])

    def label(self) -> str:
        """A short description: hwrng, mesh, launches."""
        meshes = " -> ".join(dict.fromkeys(launch[0]["mesh"] for launch in self.launches))
        hwrng = "hwrng on" if self.first["hwrng"] else "hwrng off"
        return f"{self.folder.name} ({hwrng}, {meshes})"


def read(folder: Path | str) -> Run:
    """The records of every launch in ``folder``, in launch order."""
    folder = Path(folder)
    files = sorted(folder.glob("launch-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    if not files:
        raise SystemExit(f"{folder}: no launch-<n>.jsonl (not a run of train.py)")
    launches = [[json.loads(line) for line in path.read_text().splitlines()] for path in files]
    return Run(folder, launches)


@dataclass
class Verdict:
    """Lines to print, and whether the claim held."""

    ok: bool
    lines: list[str]
    figures: dict[str, Any] = field(default_factory=dict)

    def show(self) -> int:
        """Print the lines; the exit status."""
        print("\n".join(self.lines))
        return 0 if self.ok else 1


def _relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def exact(straight: Run, resumed: Run) -> Verdict:
    """Every step's loss and masks, and the final weights, equal bit for bit."""
    lines, ok = [], True
    killed = resumed.launches[:-1]
    if not killed:
        return Verdict(False, [f"{resumed.folder}: one launch only, nothing was resumed"])
    if any(launch[-1]["event"] == "end" for launch in killed):
        lines.append("a launch before the last finished: it was not killed")
        ok = False
    saves = [r["step"] for r in killed[-1] if r["event"] == "save"]
    lines.append(
        f"killed launch: saves completed at steps {saves}; it died in the save of step "
        f"{max(r['step'] for r in killed[-1] if r['event'] == 'step')}; "
        f"resumed from {resumed.last['resumed_from']}"
    )
    steps = sorted(straight.steps)
    if sorted(resumed.steps) != steps:
        lines.append(f"steps differ: {sorted(resumed.steps)} against {steps}")
        return Verdict(False, lines)
    for launch in resumed.launches:
        for record in launch:
            if record["event"] != "step":
                continue
            base = straight.steps[record["step"]]
            for key in ("loss_hex", "masks", "samples"):
                if record[key] != base[key]:
                    ok = False
                    lines.append(f"step {record['step']}: {key} {record[key]} != {base[key]}")
    end, base_end = resumed.end, straight.end
    if end is None or base_end is None:
        return Verdict(False, [*lines, "a run did not finish"])
    differing = [
        name
        for name, digest in end["final"]["digests"].items()
        if base_end["final"]["digests"].get(name) != digest
    ]
    if differing:
        ok = False
        lines.append(f"final weights differ: {differing}")
    verdict = "EQUAL, bit for bit" if ok else "DIFFERENT"
    lines.append(
        f"{len(steps)} steps' losses and dropout masks, and {len(end['final']['digests'])} "
        f"final weight tensors: {verdict}"
    )
    return Verdict(ok, lines)


def layout(straight: Run, other: Run, bound: float = NOISE_BOUND) -> Verdict:
    """Initial weights and masks equal position by position; losses within ``bound``."""
    lines, ok = [], True
    init, base_init = other.first["init"]["digests"], straight.first["init"]["digests"]
    same_init = init == base_init
    ok &= same_init
    lines.append(
        f"initial weights drawn on {other.first['mesh']}: {len(init)} tensors, "
        f"{'equal' if same_init else 'DIFFERENT'} to {straight.first['mesh']}'s, position by "
        "position"
    )
    start = other.resumed_at
    worst, worst_step = 0.0, 0
    for step in range(start + 1, max(other.steps) + 1):
        record, base = other.steps[step], straight.steps[step]
        if record["masks"] != base["masks"] or record["samples"] != base["samples"]:
            ok = False
            lines.append(f"step {step}: the masks or the global batch differ")
        difference = _relative(record["loss"], base["loss"])
        if difference > worst:
            worst, worst_step = difference, step
    ok &= worst <= bound
    count = max(other.steps) - start
    lines.append(
        f"steps {start + 1}-{max(other.steps)} on {other.last['mesh']}: {count} steps' dropout "
        f"masks (over the global batch) and batches equal to {straight.first['mesh']}'s"
        if ok
        else f"steps {start + 1}-{max(other.steps)}: see above"
    )
    lines.append(
        f"losses: largest relative difference {worst:.2e} (step {worst_step}), bound {bound:.0e}"
    )
    return Verdict(ok, lines, {"worst": worst, "worst_step": worst_step})


def off(straight: Run, off_run: Run, off_resumed: Run) -> Verdict:
    """What differs with hwrng's part off: measured shard equalities, and the resume."""
    lines: list[str] = []
    init_equal = off_run.first["init"]["tp_shards_equal"]
    on_equal = straight.first["init"]["tp_shards_equal"]
    lines.append(
        f"initial weights: {init_equal} tensors sharded over tp hold equal shards "
        f"(hwrng on: {on_equal})"
    )
    tp_off = [r["tp_equal"] for r in off_run.steps.values()]
    tp_on = [r["tp_equal"] for r in straight.steps.values()]
    dp_off = [r["dp_equal"] for r in off_run.steps.values()]
    lines.append(
        f"dropout masks: tp shards equal in {sum(f == 1.0 for f in tp_off)} of {len(tp_off)} "
        f"steps, dp shards equal in {sum(f == 1.0 for f in dp_off)} of {len(dp_off)} (hwrng "
        f"on: {min(tp_on):.3f}-{max(tp_on):.3f} of the elements equal, as two independent "
        "masks of p=0.1 agree on 0.82)"
    )
    start = off_resumed.resumed_at
    resumed_steps = range(start + 1, max(off_resumed.steps) + 1)
    differ = [s for s in resumed_steps if off_resumed.steps[s]["loss"] != off_run.steps[s]["loss"]]
    worst = max(_relative(off_resumed.steps[s]["loss"], off_run.steps[s]["loss"]) for s in differ)
    by_digest = {tuple(r["masks"]): r["step"] for r in off_run.steps.values()}
    repeats = {
        s: by_digest.get(tuple(off_resumed.steps[s]["masks"]))
        for s in resumed_steps
        if by_digest.get(tuple(off_resumed.steps[s]["masks"])) not in (None, s)
    }
    lines.append(
        f"resumed at step {start}: {len(differ)} of {len(resumed_steps)} losses differ from the "
        f"uninterrupted run's (largest relative difference {worst:.2e})"
    )
    if repeats:
        pairs = ", ".join(f"{s}={r}" for s, r in list(repeats.items())[:4])
        lines.append(
            f"the resumed steps' masks repeat earlier steps' masks in {len(repeats)} of "
            f"{len(resumed_steps)} steps ({pairs}, ...): torch.manual_seed restarted the stream"
        )
    figures = {
        "init_tp_shards_equal": init_equal,
        "tp_equal_steps": sum(f == 1.0 for f in tp_off),
        "dp_equal_steps": sum(f == 1.0 for f in dp_off),
        "steps": len(tp_off),
        "resumed_losses_differ": len(differ),
        "resumed_steps": len(resumed_steps),
        "worst": worst,
        "repeats": len(repeats),
    }
    return Verdict(True, lines, figures)


def plot(runs: list[Run], png: Path) -> None:
    """Loss curves of ``runs``, and each one's distance from its reference.

    A run's reference is the first run listed with the same hwrng setting (list
    each kind's straight run first): the resumed runs are measured against the
    straight run they should repeat.
    """
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("the picture needs matplotlib: pip install -r requirements.txt") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, distance) = plt.subplots(1, 2, figsize=(13, 4.8))
    styles = ["-", "--", ":", "-.", (0, (5, 1)), (0, (1, 1))]
    markers = ["o", "s", "^", "D", "v", "P"]
    references: dict[bool, Run] = {}
    for index, run in enumerate(runs):
        steps = sorted(run.steps)
        curves.plot(steps, [run.steps[s]["loss"] for s in steps], marker=".",
                    linestyle=styles[index % len(styles)], label=run.label())  # fmt: skip
        reference = references.setdefault(run.first["hwrng"], run)
        if reference is run:
            continue
        resumed = [s for s in steps if s > run.resumed_at]
        gaps = [(s, abs(run.steps[s]["loss"] - reference.steps[s]["loss"])) for s in resumed]
        shown = [(s, gap) for s, gap in gaps if gap > 0]
        label = (
            f"{run.folder.name} - {reference.folder.name}: 0 in {len(gaps) - len(shown)} of "
            f"{len(gaps)} steps after the resume"
        )
        distance.plot(*(zip(*shown, strict=True) if shown else ([], [])), linestyle="none",
                      marker=markers[index % len(markers)], label=label)  # fmt: skip
    losses = sorted(step["loss"] for run in runs for step in run.steps.values())
    distance.axhline(NOISE_BOUND * losses[len(losses) // 2], color="grey", linestyle="--",
                     label=f"the layout bound: {NOISE_BOUND:.0e} of the loss")  # fmt: skip
    curves.set(xlabel="step", ylabel="training loss (mean over the global batch)",
               title="Loss per step")  # fmt: skip
    curves.legend(fontsize=7)
    distance.set(
        xlabel="step",
        ylabel="|loss - reference loss|",
        yscale="log",
        title="Distance from the uninterrupted run of its kind (0 cannot be drawn)",
    )
    distance.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(png, dpi=100)


def main(argv: list[str] | None = None) -> int:
    """The command line; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, count in (("exact", 2), ("layout", 2), ("off", 3)):
        sub = commands.add_parser(name)
        sub.add_argument("runs", nargs=count, type=Path)
    drawing = commands.add_parser("plot")
    drawing.add_argument("--png", type=Path, required=True)
    drawing.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    runs = [read(folder) for folder in args.runs]
    if args.command == "plot":
        plot(runs, args.png)
        print(f"wrote {args.png}")
        return 0
    if args.command == "off":
        return off(*runs).show()
    if args.command == "exact":
        return exact(*runs).show()
    return layout(runs[0], runs[1]).show()


if __name__ == "__main__":
    sys.exit(main())
