"""``hwrng conformance``: run the suite in-process and print one line per rule."""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
import torch

import hwrng
from hwrng.cli import format_table
from hwrng_conformance import plugin as conformance_plugin

__all__ = ["ResultCollector", "RuleResult", "run_conformance"]

_INI = os.path.join(os.path.dirname(__file__), "conformance.ini")

#: The words a skip for a missing capability carries (see ``plugin.pytest_runtest_setup``).
CAPABILITY_SKIP = "lacks capability"


@dataclass
class RuleResult:
    """The outcome of one rule on one backend.

    Attributes
    ----------
    backend
        The platform name.
    rule
        The rule's name: its test name without ``test_``, plus any parameter.
    outcome
        ``"pass"``, ``"fail"`` or ``"skip"``.
    detail
        Why it was skipped, or the first line of the failure.
    """

    backend: str
    rule: str
    outcome: str
    detail: str = ""


def _rule_name(item_name: str) -> tuple[str, str]:
    """Split ``test_rule[cpu-extra]`` into ``("cpu", "rule[extra]")``."""
    base, _, params = item_name.partition("[")
    rule = base.removeprefix("test_")
    parts = params.rstrip("]").split("-") if params else []
    backend = parts[0] if parts else "?"
    extra = "-".join(parts[1:])
    return backend, f"{rule}[{extra}]" if extra else rule


class ResultCollector:
    """A pytest plugin object that records each rule's outcome."""

    def __init__(self) -> None:
        self.results: dict[str, RuleResult] = {}
        self.errors: list[str] = []
        self.deselected = 0
        #: each backend's capability profile, as the rules that depend on it recorded it
        self.profiles: dict[str, str] = {}

    def pytest_deselected(self, items: Sequence[pytest.Item]) -> None:
        """Count rules a filter (``-k``, ``-m``) left out: the run is then partial."""
        self.deselected += len(items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Record the outcome of each phase of each rule."""
        backend, rule = _rule_name(report.nodeid.rsplit("::", 1)[-1])
        key = f"{backend}::{rule}"
        for name, value in report.user_properties:
            if name == "hwrng_profile":
                self.profiles[backend] = str(value)
        if report.when == "call" or report.outcome != "passed":
            if report.skipped:
                reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
                result = RuleResult(backend, rule, "skip", str(reason).removeprefix("Skipped: "))
            elif report.failed:
                text = str(report.longrepr).strip().splitlines()
                first = next((line for line in reversed(text) if line.startswith("E ")), "")
                result = RuleResult(backend, rule, "fail", first.removeprefix("E").strip()[:160])
            else:
                result = RuleResult(backend, rule, "pass")
            if key not in self.results or self.results[key].outcome == "pass":
                self.results[key] = result

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Remember collection errors: they fail the run."""
        if report.failed:
            self.errors.append(str(report.longrepr))


def _verdict(rows: Sequence[RuleResult], deselected: int) -> str:
    """CONFORMS, PARTIAL, DOES NOT CONFORM or NOT VERIFIED, for one backend's rows."""
    if any(r.outcome == "fail" for r in rows):
        return "DOES NOT CONFORM"
    if not any(r.outcome == "pass" for r in rows):
        return "NOT VERIFIED (no rule passed)"
    not_run = [r for r in rows if r.outcome == "skip" and CAPABILITY_SKIP not in r.detail]
    if deselected or not_run:
        return "PARTIAL (some rules were not run: see the table)"
    return "CONFORMS"


def run_conformance(
    backends: Sequence[str], *, nproc: int | None = None, extra: Sequence[str] = ()
) -> int:
    """Run the conformance suite, print a table and a verdict; return the exit status.

    The exit status is 0 only when every backend checked conforms or passes a
    partial run without failure; 1 when a rule fails or nothing was verified.

    Parameters
    ----------
    backends
        Platform names to check; empty means every available one.
    nproc
        Processes for the multi-process rules (default 4).
    extra
        More pytest arguments (``--`` first is dropped), e.g. ``-k counter``;
        a run they filter is labelled PARTIAL.

    Raises
    ------
    BackendOptionError
        For a backend hwrng cannot use here, before pytest starts.
    """
    extra = list(extra)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    names = conformance_plugin.backends_to_check(backends, "--backend")
    if not names:
        print("hwrng conformance: NOT VERIFIED: no available backend to check (hwrng backends)")
        return 1
    # -c: our own ini, so a pytest.ini or pyproject.toml in the current directory is not
    # read; --noconftest: a conftest.py there is never executed; the suite loads only
    # its own files and the conformance plugin.
    args = [
        "-c",
        _INI,
        "--rootdir",
        os.path.dirname(__file__),
        "--noconftest",
        "--pyargs",
        "hwrng_conformance.suite",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    for name in names:
        args += ["--hwrng-backend", name]
    if nproc is not None:
        args += ["--hwrng-nproc", str(nproc)]
    collector = ResultCollector()
    status = pytest.main(args + extra, plugins=[conformance_plugin, collector])
    rows = sorted(collector.results.values(), key=lambda r: (r.backend, r.rule))
    print()
    print(
        format_table(
            ["BACKEND", "RULE", "RESULT", "WHY"],
            [[r.backend, r.rule, r.outcome.upper(), r.detail] for r in rows],
        )
    )
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print()
    verdicts = []
    for name in names:
        mine = [r for r in rows if r.backend == name]
        counts = {o: sum(r.outcome == o for r in mine) for o in ("pass", "fail", "skip")}
        verdict = _verdict(mine, collector.deselected)
        verdicts.append(verdict)
        try:
            device = hwrng.get_platform(name).describe_device()
        except hwrng.HwrngError as error:
            device = str(error)
        print(
            f"hwrng conformance: backend {name} {verdict} ({counts['pass']} passed, "
            f"{counts['fail']} failed, {counts['skip']} skipped"
            + (f", {collector.deselected} deselected" if collector.deselected else "")
            + f") on {device}"
            + (f"; profile {collector.profiles[name]}" if name in collector.profiles else "")
            + f"; torch {torch.__version__}, hwrng {hwrng.__version__}, "
            f"python {sys.version.split()[0]}, {when}"
        )
    if collector.errors or status not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return int(status) or 1
    bad = ("DOES NOT CONFORM", "NOT VERIFIED")
    return 1 if any(v.startswith(bad) for v in verdicts) else 0
