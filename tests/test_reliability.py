"""The adversarial audit (issue 12), one test per finding, each failing on the code it fixed.

Multi-process findings (mp.spawn ranks' DataLoader workers, groups a rank is not in)
are in test_seeding_dist.py; pool and command-line faults here run real subprocesses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard

import hwrng
from hwrng import presets
from hwrng._cli import main as cli_main
from hwrng._registry import Registry

# -- 1. threads -------------------------------------------------------------------------


def test_regions_in_two_threads_each_draw_their_own_shard(cpu: hwrng.Platform) -> None:
    """Two threads run regions for different shards of one op, many times: each thread's
    draws must be exactly what its shard's (seed, offset) gives, never the other's."""
    tracker = hwrng.OffsetTracker(cpu)
    specs = [hwrng.ShardSpec((64,), (2,), (Shard(0),), (c,)) for c in (0, 1)]
    starts = [hwrng.shard_offsets(spec)[0] for spec in specs]
    cpu.set_seed_offset(torch.default_generator, 77, 0)
    drawn: list[list[tuple[int, torch.Tensor]]] = [[], []]
    barrier = threading.Barrier(2)

    def work(which: int) -> None:
        barrier.wait()
        for _ in range(150):
            with tracker.region(specs[which]) as generator:
                _, offset = cpu.counter.peek(generator)
                time.sleep(0)  # invite a switch inside the region
                drawn[which].append((offset - starts[which], torch.rand(32, generator=generator)))

    threads = [threading.Thread(target=work, args=(w,)) for w in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    bases = sorted(base for results in drawn for base, _ in results)
    assert len(set(bases)) == 300, "every region of either thread got a range of its own"
    for which in (0, 1):
        for base, values in drawn[which]:
            oracle = torch.Generator()
            cpu.set_seed_offset(oracle, 77, base + starts[which])
            assert torch.equal(values, torch.rand(32, generator=oracle))


def test_forks_in_two_threads_keep_their_streams(cpu: hwrng.Platform) -> None:
    tracker = hwrng.RNGStatesTracker(cpu)
    tracker.add("a", 101)
    tracker.add("b", 202)
    hwrng.manual_seed(5, platform=cpu)
    default_state = torch.get_rng_state()
    drawn: dict[str, list[torch.Tensor]] = {"a": [], "b": []}
    barrier = threading.Barrier(2)

    def work(name: str) -> None:
        barrier.wait()
        for _ in range(200):
            with tracker.fork(name):
                time.sleep(0)
                drawn[name].append(torch.rand(4))

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert torch.equal(torch.get_rng_state(), default_state), "the default stream came back"
    for name, seed in (("a", 101), ("b", 202)):
        oracle = torch.Generator()
        oracle.manual_seed(seed)
        expected = torch.rand(4 * 200, generator=oracle)
        assert torch.equal(torch.cat(drawn[name]), expected), f"stream {name!r} intact"


def test_a_thread_waiting_too_long_gets_a_clear_error(
    cpu: hwrng.Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HWRNG_CLAIM_TIMEOUT", "0.2")
    tracker = hwrng.RNGStatesTracker(cpu)
    tracker.add("x", 1)
    errors: list[BaseException] = []
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with tracker.fork("x"):
            entered.set()
            release.wait(10)

    holder = threading.Thread(target=hold, name="holder")
    holder.start()
    entered.wait(10)
    try:
        with hwrng.OffsetTracker(cpu).region(hwrng.ShardSpec((4,), (1,), (Shard(0),), (0,))):
            pass  # pragma: no cover - never entered
    except hwrng.NestingError as error:
        errors.append(error)
    finally:
        release.set()
        holder.join()
    assert errors and "held by thread 'holder'" in str(errors[0])


# -- 2. one-shot iterables --------------------------------------------------------------


def test_one_shot_iterables_are_read_once() -> None:
    spec = hwrng.ShardSpec(map(int, ["10", "6"]), (2,), (Replicate(),), (0,))  # type: ignore[arg-type]
    assert spec.shape == (10, 6) and hwrng.shard_offsets(spec) == (0, 60)
    spec = hwrng.ShardSpec((8,), iter([2]), iter([Shard(0)]), (x for x in [1]))  # type: ignore[arg-type]
    assert spec.local_shape == (4,) and spec.placements == (Shard(0),)


# -- 3. a refused region changes nothing -------------------------------------------------

HUGE = hwrng.ShardSpec((2**62, 4), (1,), (Replicate(),), (0,))  # end 2**64: past 2**63


def test_a_refused_region_leaves_a_drawn_from_generator_as_it_was(cpu: hwrng.Platform) -> None:
    torch.manual_seed(21)
    torch.rand(3)
    before = torch.get_rng_state()
    tracker = hwrng.OffsetTracker(cpu)
    with (
        pytest.raises(hwrng.InvalidOffsetError, match="would pass 2\\*\\*63"),
        tracker.region(HUGE),
    ):
        pass  # pragma: no cover - never entered
    assert torch.equal(torch.get_rng_state(), before)


def test_a_refused_nested_region_leaves_the_outer_one_as_it_was(cpu: hwrng.Platform) -> None:
    tracker = hwrng.OffsetTracker(cpu)
    spec = hwrng.ShardSpec((8,), (2,), (Shard(0),), (1,))
    cpu.set_seed_offset(torch.default_generator, 3, 0)
    with tracker.region(spec):
        torch.rand(2)
        inside = torch.get_rng_state()
        with pytest.raises(hwrng.NestingError, match="do not nest"), tracker.region(spec):
            pass  # pragma: no cover - never entered
        assert torch.equal(torch.get_rng_state(), inside)


# -- 4. duplicate seeds after set_states --------------------------------------------------


def test_restored_states_keep_their_seeds(cpu: hwrng.Platform) -> None:
    first = hwrng.RNGStatesTracker(cpu)
    first.add("a", 1)
    second = hwrng.RNGStatesTracker(cpu)
    second.set_states(first.get_states())
    assert second.seeds == {"a": 1}
    with pytest.raises(hwrng.TrackerError, match="seed 1 is already used by RNG state 'a'"):
        second.add("b", 1)
    with pytest.raises(hwrng.TrackerError, match="seed 1"):
        hwrng.RNGStatesTracker(cpu).set_states(
            {"a": first.get_states()["a"], "b": first.get_states()["a"]}
        )


# -- 5. flags and booleans ---------------------------------------------------------------


@pytest.mark.parametrize("flag", ["no", "", 1, None])
def test_trainer_flags_must_be_bools(flag: object) -> None:
    with pytest.raises(hwrng.InvalidArgumentError, match="data_parallel_random_init"):
        presets.megatron_seeds(1, dp_rank=3, data_parallel_random_init=flag)  # type: ignore[arg-type]
    with pytest.raises(hwrng.InvalidArgumentError, match="always_enable_tp_seed"):
        presets.slapo_seeds(1, tp_rank=1, always_enable_tp_seed=flag)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [torch.tensor(True), np.bool_(True), True])
def test_booleans_are_not_seeds(cpu: hwrng.Platform, seed: object) -> None:
    with pytest.raises(hwrng.InvalidSeedError, match="boolean"):
        hwrng.manual_seed(seed, platform=cpu)  # type: ignore[arg-type]
    assert hwrng.rank_seed(torch.tensor(7), {}, {}, []) == 7, "an integer tensor is a seed"  # type: ignore[arg-type]


@pytest.mark.parametrize("split_factor", [0, -2])
def test_strided_shard_needs_a_positive_split_factor(split_factor: int) -> None:
    with pytest.raises(hwrng.MeshError, match="split_factor"):
        hwrng.ShardSpec((8,), (2,), (_StridedShard(0, split_factor=split_factor),), (0,))


def test_backend_variable_keeps_its_device_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HWRNG_BACKEND", "cpu:5")
    with pytest.raises(hwrng.InvalidDeviceError, match="index 5 is out of range"):
        Registry().get_platform()
    monkeypatch.setenv("HWRNG_BACKEND", "cpu:0")
    assert Registry().get_platform().name == "cpu"


def test_misspelt_disabled_plugins_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HWRNG_DISABLE_PLUGINS", "npu,cdua")
    registry = Registry()
    with pytest.warns(hwrng.HwrngWarning, match="'cdua', which no installed plugin is called"):
        registry.load()
    assert registry.disabled_plugins == ["npu"]


# -- 6. a state sliced out of a packed buffer --------------------------------------------


def test_a_state_sliced_from_a_packed_buffer_is_applied_correctly() -> None:
    code = textwrap.dedent(
        """
        import torch, hwrng
        cpu = hwrng.get_platform("cpu")
        torch.manual_seed(1); a = torch.get_rng_state()
        torch.manual_seed(2); b = torch.get_rng_state(); expected = torch.rand(4)
        for view in (torch.cat([a, b])[a.numel():], torch.cat([a[:8], b])[8:]):
            assert view.is_contiguous() and view.dim() == 1
            cpu.set_rng_state(view)
            assert torch.equal(torch.rand(4), expected)
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


# -- 7. pool ranks never outlive their parent ---------------------------------------------

POOL_SCRIPT = """
import sys, time
from hwrng._cli import _stop_on_sigterm
from hwrng.testing import DistributedPool
import os
_stop_on_sigterm()
with DistributedPool(2, timeout=60) as pool:
    print(" ".join(str(p) for p in pool.run(os.getpid)), flush=True)
    time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead, only not yet reaped
        return stat.read().split(")")[-1].split()[0] != "Z"


def _wait_dead(pids: Sequence[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive:
            return []
        time.sleep(0.2)
    return [pid for pid in pids if _alive(pid)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_ranks_exit_when_their_parent_is_stopped(how: signal.Signals) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", POOL_SCRIPT], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        ranks = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(ranks) == 2 and all(_alive(pid) for pid in ranks)
        parent.send_signal(how)
        parent.wait(timeout=60)
        assert _wait_dead(ranks, 15) == [], "ranks outlived their parent"
    finally:
        parent.kill()
        parent.wait()


# -- 8. hostile plugins ------------------------------------------------------------------

HOSTILE = {
    "exits": "import sys\nsys.exit(3)\n",
    "slow": "import time\ntime.sleep(30)\n",
    "exit_hook": (
        "import hwrng, sys\n@hwrng.hookimpl\ndef hwrng_platforms():\n    sys.exit('no')\n"
    ),
}


@pytest.fixture
def hostile_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from helpers import write_distribution

    for name, source in HOSTILE.items():
        write_distribution(tmp_path, f"{name}-hwrng", "1.0", f"{name}_hwrng", source, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("HWRNG_PLUGIN_IMPORT_TIMEOUT", "1")
    return tmp_path


def test_hostile_plugins_are_broken_plugins(hostile_site: Path) -> None:
    import importlib

    importlib.invalidate_caches()
    started = time.monotonic()
    registry = Registry()
    assert registry.get_platform("cpu").name == "cpu"
    assert time.monotonic() - started < 10, "a slow plugin's import is bounded"
    broken = {b.plugin: b for b in registry.broken_plugins}
    assert "sys.exit(3)" in broken["exits"].error and broken["exits"].stage == "import"
    assert "took longer than 1 s" in broken["slow"].error
    assert "SystemExit" in broken["exit_hook"].error and broken["exit_hook"].stage == "hook"
    assert registry.get_platform().name == "cpu"


def test_hostile_plugins_do_not_stop_the_command_line(hostile_site: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hostile_site), *sys.path])}
    result = subprocess.run(
        [sys.executable, "-m", "hwrng", "backends"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "selected: cpu" in result.stdout
    for name in HOSTILE:
        assert any(line.startswith(f"{name} ") for line in result.stdout.splitlines()), name


# -- 9-11. the conformance command: safe, honest verdicts ---------------------------------


def _conformance(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hwrng", "conformance", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def test_conformance_never_runs_a_conftest_from_the_current_directory(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "conftest.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:nonexistent\n")
    result = _conformance("--backend", "cpu", "--nproc", "2", "--", "-k", "fork_rng", cwd=tmp_path)
    assert not marker.exists(), "a conftest.py in the current directory was executed"
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    verdict = result.stdout.strip().splitlines()[-1]
    assert verdict.startswith("hwrng conformance: backend cpu PARTIAL"), verdict
    assert "deselected" in verdict


@pytest.mark.parametrize("nproc", ["0", "1", "-5"])
def test_conformance_refuses_too_few_ranks(nproc: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli_main(["conformance", "--nproc", nproc])
    assert caught.value.code == 2
    assert "--nproc: must be >= 2" in capsys.readouterr().err


def test_conformance_with_nothing_to_check_is_not_verified() -> None:
    env = {**os.environ, "HWRNG_DISABLE_PLUGINS": "cpu,cuda,npu"}
    result = _conformance(env=env)
    assert result.returncode == 1
    assert "NOT VERIFIED" in result.stdout and "NOTSET" not in result.stdout


def test_conformance_names_its_own_option_for_an_unknown_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["conformance", "--backend", "nosuch"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("hwrng conformance: error: --backend nosuch: no hwrng backend")
    assert captured.err.count("\n") == 1


# -- 12. every error is an HwrngError and says what is wrong -----------------------------


def test_errors_that_used_to_escape(
    cpu: hwrng.Platform, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        pytest.raises(hwrng.InvalidArgumentError, match="enabled must be True or False"),
        hwrng.fork_rng(platform=cpu, enabled="yes"),  # type: ignore[arg-type]
    ):
        pass  # pragma: no cover - never entered
    with pytest.raises(hwrng.InvalidDeviceError, match="empty backend name"):
        hwrng.get_platform(":0")
    with pytest.raises(hwrng.MeshError, match=r"more than 16,777,216"):
        hwrng.seed_plan(1, {"a": 2**40}, [])
    huge = ["plan", "--mesh", "a=4294967296,b=4294967296", "--limit", "2", "--seed", "1"]
    assert cli_main(huge) == 0
    assert "18446744073709551614 more ranks" in capsys.readouterr().out


def test_backend_variable_error_is_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hwrng", "backends"],
        capture_output=True,
        text=True,
        env={**os.environ, "HWRNG_BACKEND": ":0"},
        timeout=120,
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert "selected: none (HWRNG_BACKEND=':0': empty backend name" in result.stdout


def test_a_probe_that_raises_is_reported_as_unavailable() -> None:
    from hwrng.backends.cpu import CPUPlatform

    class Exploding(CPUPlatform):
        name = "exploding"

        def unavailable_reason(self) -> str | None:
            raise RuntimeError("driver gone")

    class Plugin:
        @hwrng.hookimpl
        def hwrng_platforms(self) -> Sequence[hwrng.Platform]:
            return [Exploding()]

    registry = Registry(entry_point_group=None)
    registry.register_plugin(Plugin())
    with pytest.raises(hwrng.BackendUnavailableError, match="RuntimeError: driver gone"):
        registry.get_platform("exploding")


def test_nesting_errors_are_hwrng_errors(cpu: hwrng.Platform) -> None:
    tracker = hwrng.RNGStatesTracker(cpu)
    tracker.add("a", 1)
    with tracker.fork("a"), pytest.raises(hwrng.NestingError), tracker.fork("a"):
        pass  # pragma: no cover - never entered


# -- 13. documented surprises -------------------------------------------------------------


def test_checks_read_a_cpu_generator_without_moving_it(cpu: hwrng.Platform) -> None:
    torch.manual_seed(3)
    torch.rand(5)
    before = torch.get_rng_state()
    position = cpu.counter.peek(torch.default_generator)
    assert torch.equal(torch.get_rng_state(), before), "peek never moves the generator"
    assert cpu.get_seed_offset(torch.default_generator) == position, "read agrees with peek"


# -- 15. isolate_rng puts random and NumPy back too ---------------------------------------


def test_isolate_rng_restores_random_and_numpy(cpu: hwrng.Platform) -> None:
    import random

    hwrng.manual_seed(9, platform=cpu)
    expected = (random.random(), float(np.random.rand()), torch.rand(2))
    hwrng.manual_seed(9, platform=cpu)
    with pytest.raises(KeyError), hwrng.isolate_rng(platform=cpu):
        random.random(), np.random.rand(), torch.rand(7)
        raise KeyError("inside")
    assert (random.random(), float(np.random.rand())) == expected[:2]
    assert torch.equal(torch.rand(2), expected[2])
    with hwrng.fork_rng(platform=cpu):
        random.random()
    assert random.random() != expected[0], "fork_rng, as documented, leaves random alone"


def test_no_warnings_from_a_plain_registry() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Registry().load()
