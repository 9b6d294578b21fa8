"""What ``hwrng check`` prints: its report, the same on every rank, as text or a document."""

from __future__ import annotations

import datetime
import math
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from hwrng._cli._table import format_table

__all__ = ["CheckReport", "Verdict", "format_report"]


@dataclass(frozen=True)
class Verdict:
    """One line of the report: a check, whether it held, and why not."""

    what: str
    ok: bool
    detail: str


@dataclass
class CheckReport:
    """Everything ``hwrng check`` prints (``--json`` prints it as a document).

    ``seeds`` holds the first :data:`SEED_ROWS` ranks' seeds; every rank's own
    seed is checked against the plan by the first check.
    """

    backend: str
    device: str
    mesh: dict[str, int]
    sharded: list[str]
    seed: int
    seeds: list[tuple[int, dict[str, int], int]]
    ops: list[Verdict] = field(default_factory=list)
    streams: list[Verdict] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every check held."""
        return all(v.ok for v in self.ops + self.streams)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain values."""
        return {
            "ok": self.ok,
            "backend": self.backend,
            "device": self.device,
            "mesh": self.mesh,
            "sharded": self.sharded,
            "seed": self.seed,
            "seeds": [{"rank": r, "coordinate": c, "seed": s} for r, c, s in self.seeds],
            "ops": [vars(v) for v in self.ops],
            "streams": [vars(v) for v in self.streams],
            "seconds": round(self.seconds, 3),
            "torch": torch.__version__,
            "python": sys.version.split()[0],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckReport:
        """The report :meth:`to_dict` made (as the ranks send it to whoever prints it)."""
        return cls(
            data["backend"],
            data["device"],
            dict(data["mesh"]),
            list(data["sharded"]),
            data["seed"],
            [(s["rank"], s["coordinate"], s["seed"]) for s in data["seeds"]],
            [Verdict(**v) for v in data["ops"]],
            [Verdict(**v) for v in data["streams"]],
            data["seconds"],
        )


def format_report(report: CheckReport) -> str:
    """The readable report: header, seed table, op verdicts, stream verdicts, verdict line."""
    mesh_text = " x ".join(f"{n}={s}" for n, s in report.mesh.items())
    world = math.prod(report.mesh.values())
    names = list(report.mesh)
    table = format_table(
        ["rank", *names, "seed"],
        [[r, *(c[n] for n in names), s] for r, c, s in report.seeds],
    )
    if world > len(report.seeds):
        table += f"\n... {world - len(report.seeds)} more rank(s), each checked against the plan"
    lines = [
        f"hwrng check: backend {report.backend} ({report.device}), {world} rank(s), "
        f"mesh {mesh_text}, sharded {', '.join(report.sharded) or 'along no dim'}, "
        f"seed {report.seed}",
        "",
        table,
        "",
        format_table(
            ["CHECK", "RESULT", "DETAIL"],
            [[v.what, "PASS" if v.ok else "FAIL", v.detail] for v in report.ops],
        ),
        "",
        format_table(
            ["STREAM (hwrng.verify)", "RESULT", "DETAIL"],
            [[v.what, "PASS" if v.ok else "FAIL", v.detail] for v in report.streams],
        ),
        "",
    ]
    total = len(report.ops) + len(report.streams)
    failed = sum(not v.ok for v in report.ops + report.streams)
    verdict = f"PASSED ({total} checks)" if report.ok else f"FAILED ({failed} of {total} checks)"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines.append(
        f"hwrng check: {verdict} in {report.seconds:.1f} s; "
        f"torch {torch.__version__}, python {sys.version.split()[0]}, {when}"
    )
    return "\n".join(lines)
