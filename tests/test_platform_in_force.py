"""One rule for the platform in force: the seed plan's platform, else the registry's choice.

After ``hwrng.manual_seed(1, platform="cpu")`` on a host whose torch reports an
accelerator that no hwrng backend serves, every public entry point that takes
``platform=`` acts on the CPU without being told again. The accelerator is a
PrivateUse1 device type registered in a fresh interpreter (such a registration
lasts as long as the process), as in ``test_accelerator_refusal.py``; all the
calls run in that one interpreter, each reporting what it did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = """
import contextlib, json, random
import torch, hwrng, hwrng.dtensor, hwrng.presets
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

_setup_privateuseone_for_python_backend("hwrngpu")
assert torch.accelerator.current_accelerator().type == "hwrngpu"
results = {}


def attempt(name, action):
    try:
        results[name] = action()
    except hwrng.HwrngError as error:
        results[name] = f"{type(error).__name__}: {error}"


def in_fork():
    before = torch.get_rng_state()
    with hwrng.fork_rng():
        torch.rand(3)
    return "restored" if torch.equal(torch.get_rng_state(), before) else "CHANGED"


def in_isolation():
    before = (torch.get_rng_state(), random.getstate())
    with hwrng.isolate_rng():
        torch.rand(3), random.random()
    after = (torch.get_rng_state(), random.getstate())
    return "restored" if torch.equal(after[0], before[0]) and after[1] == before[1] else "CHANGED"


def named_states():
    tracker = hwrng.RNGStatesTracker()
    tracker.add("model", 5)
    with tracker.fork("model"):
        torch.rand(2)
    return tracker.platform.name


def installed():
    hwrng.dtensor.install()
    try:
        return hwrng.dtensor.installed_platform().name
    finally:
        hwrng.dtensor.uninstall()


hwrng.manual_seed(1, platform="cpu")
attempt("fork_rng", in_fork)
attempt("isolate_rng", in_isolation)
attempt("RNGStatesTracker", named_states)
attempt("OffsetTracker", lambda: hwrng.OffsetTracker().platform.name)
attempt("get_rng_tracker", lambda: hwrng.presets.get_rng_tracker().platform.name)
attempt("dtensor.install", installed)
attempt("state_dict", lambda: "saved" if hwrng.state_dict() else "empty")
attempt("load_state_dict", lambda: (hwrng.load_state_dict(hwrng.state_dict()), "restored")[1])


def rng_state():
    saved = hwrng.RNGState().state_dict()
    read = {key: bytes(bytearray(value)) for key, value in saved.items()}  # as DCP hands it back
    loading = hwrng.RNGState()
    loading.state_dict()  # the template DCP loads into
    loading.load_state_dict(read)
    return ",".join(sorted(saved))


attempt("RNGState", rng_state)


def invariant_op():
    spec = hwrng.ShardSpec((8,), (1,), (torch.distributed.tensor.Replicate(),), (0,))
    return "filled" if hwrng.invariant.uniform_(torch.empty(8), spec).max() < 1 else "WRONG"


attempt("invariant.uniform_", invariant_op)
attempt("manual_seed again", lambda: (hwrng.manual_seed(2), hwrng.current_seeding().platform)[1])
attempt("megatron_manual_seed", lambda: (hwrng.presets.megatron_manual_seed(3),
                                         hwrng.current_seeding().platform)[1])
attempt("slapo_set_random_seed", lambda: (hwrng.presets.slapo_set_random_seed(4),
                                          hwrng.current_seeding().platform)[1])
attempt("seed_everything", lambda: hwrng.seed_everything(5).name)
# seed_everything leaves no plan in force: the registry's choice decides again
attempt("fork_rng without a plan", in_fork)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def results() -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "HWRNG_BACKEND"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@pytest.mark.parametrize(
    ("entry_point", "expected"),
    [
        ("fork_rng", "restored"),
        ("isolate_rng", "restored"),
        ("RNGStatesTracker", "cpu"),
        ("OffsetTracker", "cpu"),
        ("get_rng_tracker", "cpu"),
        ("dtensor.install", "cpu"),
        ("manual_seed again", "cpu"),
        ("megatron_manual_seed", "cpu"),
        ("slapo_set_random_seed", "cpu"),
        ("seed_everything", "cpu"),
    ],
)
def test_every_entry_point_follows_the_plans_platform(
    results: dict[str, str], entry_point: str, expected: str
) -> None:
    assert results[entry_point] == expected


def test_state_dict_follows_it_too(results: dict[str, str]) -> None:
    assert results["state_dict"] == "saved"
    assert results["load_state_dict"] == "restored"


def test_invariant_ops_follow_it_too(results: dict[str, str]) -> None:
    """On main they asked the registry alone, which refuses the unserved accelerator."""
    assert results["invariant.uniform_"] == "filled"


def test_rng_state_saves_and_loads_on_the_plans_platform(results: dict[str, str]) -> None:
    """RNGState resolves the platform once, the plan's: on main it asked the registry, which
    refuses the unserved accelerator."""
    assert results["RNGState"] == "job,rank_0"


def test_without_a_plan_the_registry_decides_again(results: dict[str, str]) -> None:
    assert results["fork_rng without a plan"].startswith(
        "BackendNotFoundError: torch's accelerator is 'hwrngpu'"
    )
