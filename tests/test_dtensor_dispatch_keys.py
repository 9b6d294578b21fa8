"""The DTensor adapter's ``run_dtensor_rng_op`` kernel, on every accelerator's dispatch key.

torch (2.13 and 2.14: CUDA; 2.15: the current accelerator) runs a DTensor random op on an
accelerator through its ``run_dtensor_rng_op`` operator, dispatched on the key of the
tensor's device. torch 2.10 to 2.12 have no such operator: there every DTensor random op
runs in the tracker's region, on every device, and the adapter hooks no kernel; the tests
check that instead. A PrivateUse1 device registered in Python (the key Ascend's ``npu``
uses) stands in for an accelerator on the CPU: its platform's ops must dispatch to
hwrng's kernel, which consumes hwrng's seed choice. Each case runs in a fresh
interpreter, since a PrivateUse1 backend is registered once per process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from torch._prims import rng_prims

#: Whether this torch routes accelerator DTensor random ops through run_dtensor_rng_op.
HAS_OPERATOR = hasattr(rng_prims, "run_dtensor_rng_op")

SETUP = """
import inspect
import torch, hwrng
from torch._C import DispatchKey
from torch._prims import rng_prims
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
from hwrng.backends.cpu import CPUPlatform
from torch.distributed.tensor import _random

_setup_privateuseone_for_python_backend("hwrngpu")

class PrivateUse1Platform(CPUPlatform):
    # Its tensors are PrivateUse1 tensors; it draws from the CPU's generator,
    # so the kernel's numbers can be checked here.
    name = "hwrngpu"
    priority = -10

    @property
    def device_type(self):
        return "hwrngpu"

    def generator(self, device=None):
        return torch.default_generator

platform = PrivateUse1Platform()
"""

DISPATCH = """
run_dtensor_rng_op = rng_prims.run_dtensor_rng_op
assert platform.dispatch_key == "PrivateUse1", platform.dispatch_key
hwrng.dtensor.install(platform)
tracker = _random._rng_tracker
cpu = hwrng.get_platform("cpu")
generator = torch.default_generator

# the seed choice _compute_rng_offsets leaves for the op: draw with seed 1234, not 5
cpu.set_seed_offset(generator, 5, 0)
tracker._pending.choose = lambda own: 1234 if own == 5 else own
out = run_dtensor_rng_op.dispatch(
    DispatchKey.PrivateUse1, 16, 32, torch.ops.aten.uniform_.default, torch.empty(16)
)
assert tracker.take_pending_chooser() is None, "hwrng's kernel consumes the seed choice"
assert cpu.get_seed_offset(generator) == (5, 32), cpu.get_seed_offset(generator)

oracle = torch.Generator()
cpu.set_seed_offset(oracle, 1234, 16)
expected = torch.empty(16).uniform_(generator=oracle)
assert torch.equal(out, expected), "drawn with the chosen seed at hwrng's offset"

hwrng.dtensor.uninstall()
assert DispatchKey.PrivateUse1 not in run_dtensor_rng_op.py_kernels, "uninstall removes it"
print("ok")
"""

MISROUTED = """
run_dtensor_rng_op = rng_prims.run_dtensor_rng_op

class Misrouted(PrivateUse1Platform):
    @property
    def dispatch_key(self):
        return "XPU"

before = dict(run_dtensor_rng_op.py_kernels)
try:
    hwrng.dtensor.install(Misrouted())
except hwrng.DTensorHookError as error:
    assert "routes hwrngpu tensors to dispatch key PrivateUse1" in str(error), error
else:
    raise AssertionError("installed a kernel torch never runs")
assert hwrng.dtensor.installed_platform() is None, "nothing changed"
assert run_dtensor_rng_op.py_kernels == before, "nothing changed"

class NotAKey(PrivateUse1Platform):
    @property
    def dispatch_key(self):
        return "NoSuchKey"

try:
    hwrng.dtensor.install(NotAKey())
except hwrng.DTensorHookError as error:
    assert "'NoSuchKey' is not a torch DispatchKey name" in str(error), error
else:
    raise AssertionError("installed for a key that does not exist")
print("ok")
"""


#: torch 2.10 to 2.12: no operator. DTensor's dispatcher runs every random op in the
#: tracker's region; install hooks no kernel, so no dispatch key can be misrouted.
NO_OPERATOR = """
from torch.distributed.tensor import _dispatch
from hwrng.dtensor._hooks import kernel_key

assert not hasattr(rng_prims, "run_dtensor_rng_op")
source = inspect.getsource(_dispatch)
assert "run_dtensor_rng_op" not in source and "_distribute_region" in source

class Misrouted(PrivateUse1Platform):
    @property
    def dispatch_key(self):
        return "XPU"

for candidate in (platform, Misrouted()):
    assert kernel_key(candidate) is None
    hwrng.dtensor.install(candidate)
    assert hwrng.dtensor.installed_platform() is candidate
    hwrng.dtensor.uninstall()
print("ok")
"""


def _run(code: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SETUP) + code],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_a_privateuse1_platforms_ops_dispatch_to_hwrngs_kernel() -> None:
    _run(DISPATCH if HAS_OPERATOR else NO_OPERATOR)


def test_a_platform_routed_to_another_key_is_refused() -> None:
    """Where torch has the operator; without it nothing is routed, and nothing refused."""
    _run(MISROUTED if HAS_OPERATOR else NO_OPERATOR)
