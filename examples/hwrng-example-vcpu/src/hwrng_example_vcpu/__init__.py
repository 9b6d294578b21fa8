"""An out-of-tree hwrng backend, as a vendor would write one.

Everything a backend needs is here: a :class:`hwrng.DeviceModulePlatform`
subclass naming the device and its distributed backend, and a
``hwrng_platforms`` hook that the ``hwrng`` entry point in ``pyproject.toml``
points at. A real accelerator's backend is shorter still: it has no device
module of its own to write (see :mod:`hwrng_example_vcpu.device`) and
inherits the Philox counter view.

The "vcpu" devices are virtual, each backed by a CPU generator, so the
example runs -- and passes ``hwrng conformance --backend vcpu`` -- on any
machine. Its tensors are CPU tensors, whose random ops draw from torch's CPU
generator, not from the vcpu generators; so it does not claim the ``dtensor``
capability and the suite skips that rule, saying why.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import ClassVar

import hwrng

__all__ = ["VCPUPlatform", "hwrng_platforms"]


class VCPUPlatform(hwrng.DeviceModulePlatform):
    """Virtual CPU devices, each with its own generator."""

    name: ClassVar[str] = "vcpu"
    dist_backend: ClassVar[str] = "gloo"
    priority: ClassVar[int] = -10  # a software device never wins auto-selection
    capabilities: ClassVar[frozenset[str]] = frozenset()
    # gloo runs any number of ranks over CPU tensors: ranks need no device of their own.
    one_rank_per_device: ClassVar[bool] = False
    # CPU generators are Mersenne Twisters: reuse hwrng's emulated counter view.
    counter_type: ClassVar[type[hwrng.CounterView]] = hwrng.MersenneCounter

    @property
    def device_type(self) -> str:
        """``"cpu"``: the virtual devices' generators are CPU generators."""
        return "cpu"

    def find_device_module(self) -> ModuleType:
        """Return this package's device module instead of asking torch."""
        from hwrng_example_vcpu import device

        return device


@hwrng.hookimpl
def hwrng_platforms() -> Sequence[hwrng.Platform]:
    """Provide the vcpu platform."""
    return [VCPUPlatform()]
