"""The GPU acceptance run (benchmarks/gpu_acceptance.py) on a machine without a GPU.

Its steps, budgets and refusal; a step that hangs (its whole process group
stopped, its output so far kept), crashes or needs a missing module gets its
verdict and the run goes on; the verdicts read from real outputs (those of the
H200 run of 2026-11-26 among them), the documented compile refusal judged by
the torch, the contract's parts; the install step, the wheelhouse and the
commit recorded for a copy without ``.git``; where the report goes; the report
(also while the run goes on) and the goals' verdicts; a rehearsal of three
steps end to end; and the README citing the newest report or saying there is
none.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hwrng

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPT = BENCHMARKS / "gpu_acceptance.py"
sys.path.insert(0, str(BENCHMARKS))

from acceptance import (  # noqa: E402
    documented,
    goals,
    install,
    outcomes,
    probe_contract,
    provenance,
    report,
    runner,
    steps,
    wheelhouse,
)
from acceptance._figures import FIGURES_ENV  # noqa: E402
from acceptance.bandwidth import reference_bandwidth  # noqa: E402
from gpu_acceptance import out_folder  # noqa: E402

NO_GPU = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


def _script(*arguments: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=NO_GPU,
        check=False,
    )


# -- the steps, --dry-run and the refusal ---------------------------------------------------------


def test_dry_run_lists_every_step_with_its_budget_within_eight_minutes() -> None:
    done = _script("--dry-run")
    assert done.returncode == 0, done.stderr
    listed = re.findall(r"^(\S+)\s+(\d+) s  python3 ", done.stdout, re.MULTILINE)
    names = [name for name, _ in listed]
    for needed in ("conformance", "check", "graph", "compile", "bandwidth", "regions", "contract"):
        assert needed in names, done.stdout
    assert names == [step.name for step in steps.STEPS]
    assert sum(int(budget) for _, budget in listed) <= steps.TOTAL_BUDGET_S <= 480
    assert "hwrng conformance --backend cuda" in done.stdout
    assert "hwrng check --backend cuda --nproc 1" in done.stdout


def test_install_comes_first_with_install_and_every_budget_still_fits() -> None:
    done = _script("--dry-run", "--install")
    assert done.returncode == 0, done.stderr
    listed = re.findall(r"^(\S+)\s+(\d+) s  python3 ", done.stdout, re.MULTILINE)
    assert [name for name, _ in listed] == ["install", *(step.name for step in steps.STEPS)]
    assert sum(int(budget) for _, budget in listed) <= steps.TOTAL_BUDGET_S
    assert "python3 benchmarks/acceptance/install.py" in done.stdout


def test_the_help_gives_the_device_command_and_the_carry_list() -> None:
    done = _script("--help")
    assert done.returncode == 0
    assert f"command:   {wheelhouse.DEVICE_COMMAND}" in done.stdout
    assert "carry:     ['.wheelhouse']" in done.stdout
    assert wheelhouse.DEVICE_COMMAND == (
        'python3 benchmarks/gpu_acceptance.py --install --out "$OUT/gpu-acceptance"'
    )
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert wheelhouse.DEVICE_COMMAND in page and '`[".wheelhouse"]`' in page


def test_the_docs_list_every_step_with_its_budget() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    section = page[page.index("## GPU acceptance") :]
    listed = re.findall(r"^\| `([\w-]+)` \| (\d+) s \|", section, re.MULTILINE)
    every = (steps.INSTALL, *steps.STEPS)
    assert listed == [(step.name, str(step.budget_s)) for step in every]
    assert f"add up to {steps.TOTAL_BUDGET_S} s" in section


def test_without_cuda_the_run_refuses_and_writes_nothing(tmp_path: Path) -> None:
    done = _script("--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "cannot run" in done.stderr and "--rehearse" in done.stderr
    assert not (tmp_path / "out").exists()


def test_an_unknown_step_or_a_missing_out_is_a_usage_error() -> None:
    assert _script("--dry-run", "--only", "nonesuch").returncode == 2
    assert "--out DIR is required" in _script("--rehearse").stderr


def test_without_pytest_its_steps_are_not_run_and_say_why(tmp_path: Path) -> None:
    """As on a GPU image without pytest: those steps get their verdict, the run its report."""
    hidden = tmp_path / "site"
    hidden.mkdir()
    # every Python of the run (the runner, its module check, the steps) starts without pytest
    (hidden / "sitecustomize.py").write_text("import sys\nsys.modules['pytest'] = None\n")
    path = os.pathsep.join(p for p in (str(hidden), os.environ.get("PYTHONPATH")) if p)

    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SCRIPT), *arguments],
            capture_output=True,
            text=True,
            timeout=120,
            env={**NO_GPU, "PYTHONPATH": path},
            check=False,
        )

    listed = run("--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("(pytest missing here: it would not run)") == 3
    done = run("--rehearse", "--only", "graph", "conformance", "--out", str(tmp_path / "out"))
    assert done.returncode == 1, done.stderr
    saved = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert [(s["name"], s["verdict"], s["summary"]) for s in saved["steps"]] == [
        ("graph", "not run", "not run: pytest missing"),
        ("conformance", "not run", "not run: pytest missing"),
    ]


# -- the runner: budgets, hangs, crashes, missing modules ----------------------------------------


def _step(name: str, code: str, budget_s: int = 30, needs: tuple[str, ...] = ()) -> steps.Step:
    return steps.Step(name, f"the {name} case", budget_s, needs, lambda c, d: ["-c", code],
                      outcomes.from_probe)  # fmt: skip


PASSES = f"""
import json, os
json.dump({{"verdict": "passed", "summary": "fine", "figures": {{"x": 1}}}},
          open(os.environ["{FIGURES_ENV}"], "w"))
"""
HANGS_WITH_A_CHILD = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL stops it
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print("pids", os.getpid(), child.pid, flush=True)
time.sleep(120)
"""
CONTEXT = steps.Context("cpu", rehearsal=True)


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether ``pid`` has exited (a zombie awaiting its reaper counts), waiting ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
                if stat.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def _all_gone(output: str) -> bool:
    """Whether the hanging step and its child (the pids it printed) are gone; kills what is not."""
    found = re.search(r"pids (\d+) (\d+)", output)
    assert found, output
    pids = [int(pid) for pid in found.groups()]
    gone = all(_gone(pid) for pid in pids)
    for pid in pids:  # a failed test leaves nothing behind
        if not _gone(pid, within_s=0):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return gone


def test_a_hanging_step_is_stopped_at_its_budget_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "GRACE_S", 0.5)
    started = time.monotonic()
    (result,) = runner.run_all(
        [_step("hang", HANGS_WITH_A_CHILD, budget_s=3)], CONTEXT, tmp_path, 60, progress=print
    )
    assert time.monotonic() - started < 15
    assert result.verdict == "timed out" and "budget of 3 s" in result.summary
    assert _all_gone(result.tail), "the step or its own child outlived it"
    # what it printed before its budget ran out is kept, in the report and in steps.log
    assert "pids" in result.summary and "pids" in (tmp_path / "steps.log").read_text()


def test_ctrl_c_on_the_run_stops_the_running_step_and_its_children(tmp_path: Path) -> None:
    # Ctrl-C as a terminal delivers it: a run started in the background of a shell script (a
    # CI job, `nohup ... &`) inherits SIGINT ignored, and Python then raises no
    # KeyboardInterrupt for it
    code = f"""
import signal, sys
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {str(BENCHMARKS)!r})
from acceptance import outcomes, runner, steps
runner.GRACE_S = 0.5
hang = steps.Step("hang", "", 60, (), lambda c, d: ["-c", {HANGS_WITH_A_CHILD!r}],
                  outcomes.from_probe)
runner.run_all([hang], steps.Context("cpu", True), Path({str(tmp_path)!r}), 60)
"""
    parent = subprocess.Popen([sys.executable, "-c", code], env=NO_GPU)
    log = tmp_path / "steps.log"
    # the step's own line, not the command the runner logs before starting it (which holds the
    # same word): Ctrl-C then reaches a run whose step is running, as the test means
    printed = re.compile(r"^pids \d+ \d+$", re.MULTILINE)
    deadline = time.monotonic() + 60
    while not (log.exists() and printed.search(log.read_text())) and time.monotonic() < deadline:
        assert parent.poll() is None, "the run stopped before its step started"
        time.sleep(0.1)
    parent.send_signal(signal.SIGINT)
    assert parent.wait(timeout=30) != 0
    assert _all_gone(log.read_text()), "Ctrl-C left the step or its child running"


def test_crashes_and_hangs_get_their_verdicts_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "GRACE_S", 0.5)
    cases = [
        _step("aborts", "import os; os.abort()"),
        _step("raises", "raise RuntimeError('the device fell over')"),
        _step("hangs", "import time; time.sleep(60)", budget_s=2),
        _step("lacks", PASSES, needs=("hwrng_no_such_module",)),
        _step("passes", PASSES),
        _step(
            "writes nonsense", f"open(__import__('os').environ['{FIGURES_ENV}'], 'w').write('[')"
        ),
    ]
    results = runner.run_all(cases, CONTEXT, tmp_path, 120, progress=print)
    verdicts = {r.name: (r.verdict, r.summary) for r in results}
    assert verdicts["aborts"][0] == "crashed" and "signal 6" in verdicts["aborts"][1]
    assert verdicts["raises"][0] == "crashed"
    assert "RuntimeError: the device fell over" in verdicts["raises"][1]
    assert verdicts["hangs"][0] == "timed out"
    assert verdicts["lacks"] == ("not run", "not run: hwrng_no_such_module missing")
    assert verdicts["passes"] == ("passed", "fine")
    assert results[4].figures == {"x": 1} and results[4].duration_s > 0
    assert verdicts["writes nonsense"][0] == "crashed"


def test_the_runs_budget_limits_the_steps_and_then_stops_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "MIN_START_S", 0.5)
    monkeypatch.setattr(runner, "GRACE_S", 0.5)
    results = runner.run_all(
        [_step("long", "import time; time.sleep(60)", budget_s=60), _step("next", PASSES)],
        CONTEXT,
        tmp_path,
        total_s=2,
        progress=print,
    )
    assert [r.verdict for r in results] == ["timed out", "not run"]
    assert results[0].budget_s <= 2
    assert results[1].summary == "not run: the run's budget of 2 s was spent"


# -- verdicts from real outputs ----------------------------------------------------------------


def _run(output: str, returncode: int, rehearsal: bool = False) -> outcomes.Run:
    return outcomes.Run(returncode, output, Path("/nonexistent"), Path("/nonexistent"), rehearsal)


H200_CONFORMANCE = (
    "hwrng conformance: backend cuda DOES NOT CONFORM (9 passed, 69 failed, 0 skipped) on NVIDIA "
    "H200; profile float64, offsets; torch 2.11.0+cu130, hwrng 0.1.0, python 3.12.3, "
    "2026-11-26 01:13 UTC"
)
H200_CHECK = (
    "hwrng check: crashed: rank 0 failed: TypeError: cannot create weak reference to "
    "'torch._C.Generator' object"
)


def test_the_h200_runs_outputs_read_as_failed_and_crashed() -> None:
    conformance = outcomes.from_conformance(_run(f"....\n{H200_CONFORMANCE}\n", 1))
    assert conformance.verdict == "failed"
    assert conformance.figures == {
        "backend": "cuda",
        "verdict": "DOES NOT CONFORM",
        "passed": 9,
        "failed": 69,
        "skipped": 0,
    }
    check = outcomes.from_check(_run(f"{H200_CHECK}\n", 3))
    assert check.verdict == "crashed" and "exit status 3" in check.summary
    tests = outcomes.from_pytest(
        _run("..FFE\n7 failed, 2 passed, 1 skipped, 18 errors in 6.55s\n", 1)
    )
    assert tests.verdict == "failed"
    assert tests.figures["counts"] == {"failed": 7, "passed": 2, "skipped": 1, "errors": 18}


def test_conformance_and_check_verdicts() -> None:
    line = "hwrng conformance: backend cuda {} (70 passed, 0 failed, 8 skipped) on NVIDIA H100"
    assert outcomes.from_conformance(_run(line.format("CONFORMS"), 0)).verdict == "passed"
    partial = "PARTIAL (some rules were not run: see the table)"
    assert outcomes.from_conformance(_run(line.format(partial), 0)).verdict == "partial"
    assert outcomes.from_conformance(_run("Traceback\nImportError: x", 1)).verdict == "crashed"
    passed = "hwrng check: PASSED (14 checks) in 4.7 s; torch 2.13.0+cpu"
    assert outcomes.from_check(_run(passed, 0)) == outcomes.Outcome(
        "passed", passed.removeprefix("hwrng check: "), {"checks": 14}
    )
    assert outcomes.from_check(_run("hwrng check: FAILED (3 of 14 checks)", 1)).verdict == "failed"


def test_a_cuda_test_skipped_for_want_of_cuda_fails_on_a_gpu_but_not_in_a_rehearsal() -> None:
    output = (
        "ss..\nSKIPPED [6] backends/cuda/tests/test_cuda.py:33: no CUDA device is visible\n"
        "SKIPPED [1] tests/test_philox_triton.py:236: Triton is not installed\n"
        "2 passed, 7 skipped in 3.1s\n"
    )
    on_gpu = outcomes.from_pytest(_run(output, 0))
    assert on_gpu.verdict == "failed" and "6 test(s) skipped" in on_gpu.summary
    assert on_gpu.figures["skipped because"] == {
        "no CUDA device is visible": 6,
        "Triton is not installed": 1,
    }
    assert outcomes.from_pytest(_run(output, 0, rehearsal=True)).verdict == "passed"
    assert outcomes.from_pytest(_run("no tests ran in 0.1s", 5)).verdict == "crashed"
    assert outcomes.from_pytest(_run("3 deselected in 0.1s", 5)).verdict == "failed"


def test_the_region_costs_are_read_from_benchmarks_runs_results(tmp_path: Path) -> None:
    from _timing import Result

    region = "DTensor region on one GPU"
    rows = [
        Result("empty region or fork", "torch.random.fork_rng", 3.4, 0.2, 15),
        Result(region, "torch OffsetBasedRNGTracker._distribute_region", 20.0, 1.0, 15),
        Result(region, "hwrng OffsetTracker.region", 15.0, 1.0, 15, "torch ...", 0.75),
        Result(region, "host-device syncs per hwrng region", 0.0, 0.0, 10, note="none"),
    ]

    def read(results: list[Result], rehearsal: bool, returncode: int = 0) -> outcomes.Outcome:
        document = {"machine": {}, "results": [r.as_dict() for r in results]}
        (tmp_path / "cuda-2026-12-01-quick.json").write_text(json.dumps(document))
        return outcomes.from_benchmark(
            outcomes.Run(returncode, "", tmp_path / "figures.json", tmp_path, rehearsal)
        )

    on_gpu = read(rows, rehearsal=False)
    assert on_gpu.verdict == "passed"
    assert "hwrng's region 0.75x torch's OffsetBasedRNGTracker region" in on_gpu.summary
    assert len(on_gpu.figures["cases"]) == 4
    assert read(rows[:1], rehearsal=False).verdict == "failed"
    assert read(rows[:1], rehearsal=True).verdict == "passed"
    assert read(rows, rehearsal=False, returncode=1).verdict == "crashed"


# -- the goals and the report -------------------------------------------------------------------


def _bandwidth(
    ops: dict[str, tuple[float, float, float | None]], **extra: object
) -> runner.StepResult:
    """A passed bandwidth step: per op (hwrng ms, torch ms, hwrng % of peak)."""
    figures = {
        "device": "NVIDIA H200",
        "log2": 26,
        "repeats": 20,
        "timer": "CUDA events",
        "path": "the fused Triton kernel",
        "copy GB/s": 3900.0,
        "peak GB/s": 4800,
        "peak source": "NVIDIA's datasheet peak for NVIDIA H200",
        "ops": {
            op: {
                "torch op": "torch.rand",
                "hwrng ms": mine,
                "torch ms": theirs,
                "ratio": round(mine / theirs, 3),
                "hwrng GB/s": 268.4 / mine,
                "torch GB/s": 268.4 / theirs,
                "hwrng % of peak": percent,
                "torch % of peak": 80.0,
                "hwrng % of copy": None,
            }
            for op, (mine, theirs, percent) in ops.items()
        },
        **extra,
    }
    return runner.StepResult(
        "bandwidth", "fill bandwidth", "python3 ...", 45, "passed", "ok", figures
    )


def test_the_goals_verdicts() -> None:
    # the H200's figures of 2026-11-26: every goal missed
    h200 = _bandwidth({"uniform": (0.565, 0.115, 9.9), "normal": (0.79, 0.16, 7.1),
                       "dropout": (0.54, 0.20, None)})  # fmt: skip
    assert [g.verdict for g in goals.judge(h200, rehearsal=False)] == ["not met"] * 3
    fast = _bandwidth({"uniform": (0.12, 0.115, 85.0), "normal": (0.13, 0.12, 79.0),
                       "dropout": (0.23, 0.20, None)})  # fmt: skip
    judged = goals.judge(fast, rehearsal=False)
    assert [g.verdict for g in judged] == ["met", "not met", "met"]
    assert "79% of 4,800 GB/s" in judged[1].detail
    no_peak = _bandwidth({"uniform": (0.12, 0.115, None), "normal": (0.5, 0.12, None),
                          "dropout": (0.23, 0.20, None)})  # fmt: skip
    assert [g.verdict for g in goals.judge(no_peak, rehearsal=False)] == [
        "unmeasured", "not met", "met"]  # fmt: skip
    assert {g.verdict for g in goals.judge(fast, rehearsal=True)} == {"unmeasured"}
    small = _bandwidth({"uniform": (0.1, 0.1, 90.0)}, log2=20)
    assert "not 2**26" in goals.judge(small, rehearsal=False)[0].detail
    assert {g.verdict for g in goals.judge(None, rehearsal=False)} == {"unmeasured"}
    failed = runner.StepResult("bandwidth", "", "", 45, "crashed", "boom")
    assert "bandwidth step crashed" in goals.judge(failed, rehearsal=False)[0].detail


def test_the_peak_comes_from_the_table_else_the_measured_copy_else_unknown() -> None:
    assert reference_bandwidth("NVIDIA H200", 4100.0) == (
        4800,
        "NVIDIA's datasheet peak for NVIDIA H200",
    )
    assert reference_bandwidth("NVIDIA H100 80GB HBM3", None)[0] == 3350
    assert reference_bandwidth("NVIDIA GH200 480GB", 3700.0)[0] == 3700.0
    assert reference_bandwidth("Some Card", None) == (None, "unknown")


def test_the_report_holds_the_machine_every_verdict_and_the_goals(tmp_path: Path) -> None:
    environment = runner.StepResult(
        "environment", "the machine", "python3 e", 20, "passed", "H200", duration_s=3.0,
        figures={"device": "NVIDIA H200", "SMs": 132, "driver": "580.95", "torch version":
                 "2.11.0+cu130", "triton version": "3.6.0", "hwrng commit": "abc123",
                 "CUDA runtime (torch)": "13.0", "date": "2026-12-01 10:00 UTC"},
    )  # fmt: skip
    conformance = runner.StepResult(
        "conformance", "rules", "python3 -m hwrng conformance", 90, "failed", "DOES NOT | CONFORM",
        tail="E   assert 1 == 2\n```nested fence```\n",
    )  # fmt: skip
    bandwidth = _bandwidth({"uniform": (0.12, 0.115, 85.0), "normal": (0.13, 0.12, 81.0),
                            "dropout": (0.23, 0.20, None)})  # fmt: skip
    results = [environment, conformance, bandwidth]
    judged = goals.judge(bandwidth, rehearsal=False)
    info = report.RunInfo(
        "python3 benchmarks/gpu_acceptance.py --out X", "now", 312.5, 470, False, 1, 3
    )
    machine = report.machine(results, {"device": "unknown", "python": "3.12.3"})
    markdown, as_json = report.write(tmp_path, info, machine, results, judged)
    saved = json.loads(as_json.read_text(encoding="utf-8"))
    assert saved["machine"]["device"] == "NVIDIA H200" and saved["machine"]["python"] == "3.12.3"
    assert [s["verdict"] for s in saved["steps"]] == ["passed", "failed", "passed"]
    assert saved["steps"][1]["tail"].startswith("E   assert")
    assert [g["verdict"] for g in saved["goals"]] == ["met", "met", "met"]
    assert saved["passed"] is False and saved["rehearsal"] is False
    text = markdown.read_text(encoding="utf-8")
    assert text.startswith("# hwrng GPU acceptance: NVIDIA H200, 2026-12-01")
    for row in (
        "| SMs | 132 |",
        "| driver | 580.95 |",
        "| triton | 3.6.0 |",
        "| hwrng commit | abc123 |",
    ):
        assert row in text
    assert "| conformance | failed | DOES NOT \\| CONFORM |" in text
    assert "````text\nE   assert 1 == 2" in text  # a tail holding a fence gets a longer one
    assert "| uniform | 0.120 | torch.rand 0.115 | 1.04x |" in text
    assert "rehearsal" not in text.lower()


# -- a rehearsal, end to end ------------------------------------------------------------------


def test_a_rehearsal_runs_the_cpu_analogues_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "rehearsal"
    done = _script("--rehearse", "--only", "environment", "check", "bandwidth",
                   "--bandwidth-log2", "14", "--out", str(out), timeout=240)  # fmt: skip
    saved = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert done.returncode == 0, (done.stdout, [(s["name"], s["tail"]) for s in saved["steps"]])
    assert saved["rehearsal"] is True and saved["passed"] is True
    assert [(s["name"], s["verdict"]) for s in saved["steps"]] == [
        ("environment", "passed"), ("check", "passed"), ("bandwidth", "passed")]  # fmt: skip
    assert saved["steps"][1]["command"] == "python3 -m hwrng check --backend cpu --nproc 1"
    scale = steps.REHEARSAL_BUDGET_SCALE
    assert saved["steps"][1]["budget_s"] == scale * steps.select(["check"])[0].budget_s
    assert saved["machine"]["hwrng version"] == hwrng.__version__
    assert set(saved["steps"][2]["figures"]["ops"]) == {"uniform", "normal", "dropout"}
    assert {g["verdict"] for g in saved["goals"]} == {"unmeasured"}
    assert "**A rehearsal on the CPU: no GPU ran.**" in (out / "report.md").read_text("utf-8")
    # three files, whatever the steps: a device machine returns at most 8
    assert sorted(p.name for p in out.rglob("*")) == ["report.json", "report.md", "steps.log"]
    log = (out / "steps.log").read_text("utf-8")
    assert "==== check (budget" in log and "hwrng check: PASSED" in log


# -- the compile step: what the docs document for the torch it runs on --------------------------

RUN_REFUSED = (
    "a compiled DTensor random op drew nothing from the generator hwrng positioned for it: the "
    "compiled code drew its numbers elsewhere"
)


def test_the_documented_inductor_refusal_passes_on_the_torches_it_is_documented_for() -> None:
    adapter, invariant = "DTensor ops, hwrng adapter", "DTensor ops, invariant mode"
    for version in ("2.10.0", "2.11.0+cu130"):
        assert documented.compile_refusal(adapter, RUN_REFUSED, version)
    for version in ("2.12.1+cu130", "2.13.0+cpu", "2.15.0"):  # eager's values are documented
        assert not documented.compile_refusal(adapter, RUN_REFUSED, version)
    other = "aten.native_dropout.default: hwrng's invariant mode does not run under torch.compile"
    assert documented.compile_refusal(invariant, other, "2.13.0")
    assert not documented.compile_refusal(adapter, other, "2.11.0")
    assert not documented.compile_refusal(invariant, RUN_REFUSED, "2.11.0")


def test_the_refusal_judged_is_the_one_hwrng_raises_and_the_docs_document() -> None:
    tracker = ast.parse((ROOT / "hwrng" / "dtensor" / "_tracker.py").read_text("utf-8"))
    messages = [n.value for n in ast.walk(tracker) if isinstance(n, ast.Constant)]
    assert any(documented.RUN_REFUSAL in str(m) for m in messages), "hwrng says it otherwise"
    page = (ROOT / "docs" / "cuda-graphs-compile.md").read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `inductor`, `fallback"))
    torches = ", ".join(f"{major}.{minor}" for major, minor in documented.RUN_REFUSAL_TORCHES)
    assert f"torch {torches}: refused when the graph runs" in row


# -- the contract step's parts ---------------------------------------------------------------


def test_the_contract_verdict_lets_a_rehearsal_pass_without_what_needs_a_gpu() -> None:
    held = ("held", "known answers on cpu, int32 positions: 0 wrong []")
    no_gpu = ("not run", probe_contract.NEEDS_CUDA)
    parts = {"known-answers-int32": held, "gpu-equals-cpu": no_gpu}
    assert probe_contract.verdict(parts, [], rehearsal=True) == "passed"
    assert probe_contract.verdict(parts, [], rehearsal=False) == "partial"
    no_triton = {**parts, "ptx": ("not run", "triton missing")}
    assert probe_contract.verdict(no_triton, [], rehearsal=True) == "partial"
    failed = {**parts, "ptx": ("FAILED", "AssertionError")}
    assert probe_contract.verdict(failed, [], rehearsal=True) == "failed"
    assert probe_contract.verdict(parts, ["normal_ float16: values differ"], True) == "failed"


def test_a_contract_part_runs_in_a_process_of_its_own_and_says_why_it_did_not_run() -> None:
    part = probe_contract.Part("gpu-equals-cpu", "cpu")
    assert part.result() == ("not run", probe_contract.NEEDS_CUDA)
    assert part.process.returncode == 3


# -- the install step, the wheelhouse, the commit ----------------------------------------------


def test_the_install_step_without_a_wheelhouse_fails_naming_prepare(tmp_path: Path) -> None:
    figures = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "acceptance" / "install.py"),
         "--wheelhouse", str(tmp_path / "none")],
        capture_output=True, text=True, timeout=60, check=False,
        env={**NO_GPU, FIGURES_ENV: str(figures)},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    saved = json.loads(figures.read_text(encoding="utf-8"))
    assert saved["verdict"] == "failed"
    assert "no wheelhouse at" in saved["summary"] and "--prepare" in saved["summary"]
    assert "$" not in done.stdout  # no pip command ran


def test_the_install_step_would_not_replace_hwrng_installed_from_elsewhere(
    tmp_path: Path,
) -> None:
    import importlib.metadata

    elsewhere = install.installed_elsewhere(tmp_path)  # this Python's hwrng is not from there
    assert any(e.startswith(f"hwrng {importlib.metadata.version('hwrng')} (") for e in elsewhere)
    pip = install.commands(tmp_path, tmp_path / "wh")
    assert all("--no-index" in command for command in pip)
    assert pip[0][-2:] == ["-r", str(tmp_path / "wh" / wheelhouse.REQUIREMENTS_FILE)]
    assert pip[1][-6:] == ["-e", str(tmp_path / "."), "-e", str(tmp_path / "backends/cuda"),
                           "-e", str(tmp_path / "conformance")]  # fmt: skip


def test_the_wheelhouse_takes_pure_python_wheels_only() -> None:
    pure = ["pytest-9.2.0-py3-none-any.whl", "six-1.17.0-py2.py3-none-any.whl",
            "setuptools-81.0.0-1-py3-none-any.whl"]  # fmt: skip
    compiled = ["tomli-2.2.1-cp311-cp311-manylinux_2_17_x86_64.whl",
                "numpy-2.4.6-cp312-abi3-manylinux_2_28_x86_64.whl",
                "thing-1.0-cp312-none-any.whl", "notes.txt"]  # fmt: skip
    assert wheelhouse.not_pure(pure + compiled) == compiled
    assert "setuptools>=70.1,<82" in wheelhouse.REQUIREMENTS  # torch 2.11 requires < 82


def _git(root: Path, *arguments: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t.invalid",
         *arguments], check=True, capture_output=True,
    )  # fmt: skip


def test_a_copy_without_git_reports_the_commit_recorded_and_whether_it_is_that_tree(
    tmp_path: Path,
) -> None:
    checkout, copy = tmp_path / "checkout", tmp_path / "copy"
    (checkout / "pkg").mkdir(parents=True)
    (checkout / "pkg" / "a.py").write_text("a = 1\n")
    (checkout / "b.txt").write_text("b\n")
    (checkout / ".gitignore").write_text(".wheelhouse/\n")
    _git(checkout, "init", "-q")
    _git(checkout, "add", ".")
    _git(checkout, "commit", "-q", "-m", "one")
    (checkout / "new.txt").write_text("untracked, not ignored: it travels\n")
    (checkout / ".wheelhouse").mkdir()
    saved = provenance.write(checkout, checkout / ".wheelhouse")
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert saved["commit"] == head and saved["uncommitted changes"] is False
    assert sorted(saved["files"]) == [".gitignore", "b.txt", "new.txt", "pkg/a.py"]
    assert provenance.commit(checkout, checkout / ".wheelhouse", {}) == head  # git knows
    shutil.copytree(checkout, copy, ignore=shutil.ignore_patterns(".git"))
    said = provenance.commit(copy, copy / ".wheelhouse", {})
    assert said.startswith(f"{head} (recorded by --prepare, ")
    assert said.endswith("this tree is the one recorded)")
    (copy / "pkg" / "a.py").write_text("a = 2\n")
    assert "1 file(s) of this tree differ from it: pkg/a.py" in provenance.commit(
        copy, copy / ".wheelhouse", {}
    )
    assert provenance.commit(copy, copy / ".wheelhouse", {"HWRNG_COMMIT": "abc"}) == (
        "abc (from HWRNG_COMMIT)"
    )
    assert provenance.commit(copy, copy / "none", {}).startswith("unknown (no .git")


# -- where the report goes, and a report written while the run goes on -------------------------


def test_the_report_goes_under_out_by_default_and_elsewhere_with_a_warning(tmp_path: Path) -> None:
    home = {"OUT": str(tmp_path)}
    assert out_folder(None, home) == (tmp_path / "gpu-acceptance", None)
    assert out_folder(None, {}) == (None, None)
    assert out_folder(tmp_path / "mine", home) == (tmp_path / "mine", None)
    given, warning = out_folder(Path("/elsewhere"), home)
    assert given == Path("/elsewhere") and warning is not None
    assert "not under $OUT" in warning and "--out $OUT/gpu-acceptance" in warning
    assert out_folder(Path("/elsewhere"), {}) == (Path("/elsewhere"), None)


def test_a_report_written_before_the_last_step_says_the_run_is_incomplete(tmp_path: Path) -> None:
    done = runner.StepResult("environment", "the machine", "python3 e", 15, "passed", "ok")
    info = report.RunInfo("python3 benchmarks/gpu_acceptance.py", "now", 20.0, 470, False, None, 9)
    text = report.markdown(info, {"device": "NVIDIA H200"}, [done], [])
    assert "Result: **INCOMPLETE** -- 1 of 1 steps passed" in text
    assert "after 1 of 9 steps" in text
    saved = report.document(info, {}, [done], [])
    assert saved["complete"] is False and saved["passed"] is False


# -- the README and the newest report -----------------------------------------------------------


def newest_report() -> Path | None:
    """The newest GPU acceptance report (no rehearsal) of this hwrng version, if any."""
    found = []
    for path in (ROOT / "benchmarks" / "results").glob("*/report.json"):
        saved = json.loads(path.read_text(encoding="utf-8"))
        if (
            saved.get("report") == "hwrng GPU acceptance"
            and not saved["rehearsal"]
            and saved["machine"].get("hwrng version") == hwrng.__version__
        ):
            found.append((saved["started"], path.parent / "report.md"))
    return max(found)[1] if found else None


def test_the_readme_cites_the_newest_gpu_report_or_says_there_is_none() -> None:
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())  # unwrapped
    newest = newest_report()
    if newest is None:
        assert f"No GPU acceptance report exists yet for hwrng {hwrng.__version__}" in readme
    else:
        assert str(newest.relative_to(ROOT)) in readme
