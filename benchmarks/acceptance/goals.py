"""The invariant kernel's performance goals, each judged met, not met or unmeasured.

From the bandwidth step's figures of this run, never from an earlier one:
``uniform`` and ``normal`` float32 at 2**26 within 1.2x of torch's
``rand``/``randn`` and at least 80% of the card's peak memory bandwidth;
``dropout`` within 1.2x of torch's. A goal is unmeasured where the bandwidth
step did not pass, measured another size, ran on the CPU (a rehearsal), or the
card's peak is unknown; it is not met as soon as one measured part misses.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from acceptance.runner import StepResult

GOAL_LOG2 = 26
MAX_RATIO = 1.2
MIN_PERCENT_OF_PEAK = 80.0
#: (op, its torch counterpart, whether the goal includes the share of peak bandwidth)
GOALS = (
    ("uniform", "torch.rand", True),
    ("normal", "torch.randn", True),
    ("dropout", "dropout", False),
)


@dataclass(frozen=True)
class Goal:
    """One goal, its verdict (``met``, ``not met``, ``unmeasured``) and the figures behind it."""

    goal: str
    verdict: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        """Plain values for ``report.json``."""
        return asdict(self)


def _statement(op: str, torch_op: str, with_peak: bool) -> str:
    peak = (
        f" and at least {MIN_PERCENT_OF_PEAK:.0f}% of the card's peak bandwidth"
        if with_peak
        else ""
    )
    return f"{op} float32 at 2**{GOAL_LOG2}: within {MAX_RATIO}x of {torch_op}{peak}"


def _unmeasured_why(bandwidth: StepResult | None, rehearsal: bool) -> str | None:
    if bandwidth is None:
        return "the bandwidth step was not selected"
    if bandwidth.verdict != "passed":
        return f"the bandwidth step {bandwidth.verdict}: {bandwidth.summary}"
    if rehearsal:
        return "a rehearsal on the CPU measures no GPU"
    if bandwidth.figures.get("log2") != GOAL_LOG2:
        return f"measured at 2**{bandwidth.figures.get('log2')} values, not 2**{GOAL_LOG2}"
    return None


def _judge_one(figures: dict[str, Any], op: str, torch_op: str, with_peak: bool) -> Goal:
    measured = figures["ops"][op]
    ratio = float(measured["ratio"])
    parts = [
        f"hwrng {measured['hwrng ms']:.3f} ms, {torch_op} {measured['torch ms']:.3f} ms: "
        f"{ratio:.2f}x (goal <= {MAX_RATIO}x)"
    ]
    missed = ratio > MAX_RATIO
    unknown = False
    if with_peak:
        percent = measured["hwrng % of peak"]
        if percent is None:
            unknown = True
            parts.append("share of peak unknown (neither the card's peak nor a copy is known)")
        else:
            missed = missed or percent < MIN_PERCENT_OF_PEAK
            parts.append(
                f"{measured['hwrng GB/s']:,.0f} GB/s = {percent:.0f}% of "
                f"{figures['peak GB/s']:,.0f} GB/s, {figures['peak source']} "
                f"(goal >= {MIN_PERCENT_OF_PEAK:.0f}%)"
            )
    verdict = "not met" if missed else "unmeasured" if unknown else "met"
    return Goal(_statement(op, torch_op, with_peak), verdict, "; ".join(parts))


def judge(bandwidth: StepResult | None, rehearsal: bool) -> list[Goal]:
    """Every goal's verdict from this run's bandwidth step (``None``: it was not run)."""
    why = _unmeasured_why(bandwidth, rehearsal)
    if why is not None:
        return [Goal(_statement(*goal), "unmeasured", why) for goal in GOALS]
    assert bandwidth is not None
    return [_judge_one(bandwidth.figures, *goal) for goal in GOALS]
