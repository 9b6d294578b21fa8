"""An out-of-tree hwrng backend whose generators have no offsets.

PyTorch's accelerator guide makes a generator's ``get_offset``/``set_offset``
optional, and its reference PrivateUse1 backend, OpenReg, raises on both: its
generator derives from the CPU generator (a Mersenne Twister with no
counter). This backend is built the same way -- its devices' generators are
CPU generators -- and is as short as a backend gets: it says nothing about
counters. hwrng sees that the generators have no offset API and positions
them through their state, as it does torch's CPU generator (see
``hwrng.DeviceModulePlatform``); ``hwrng conformance --backend nooffset``
passes every rule, the invariant ops' known answers included, and reports the
profile ``no-offsets``.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import ClassVar

import hwrng

__all__ = ["NoOffsetPlatform", "hwrng_platforms"]


class NoOffsetPlatform(hwrng.DeviceModulePlatform):
    """Virtual devices whose generators have no offset API."""

    name: ClassVar[str] = "nooffset"
    dist_backend: ClassVar[str] = "gloo"
    priority: ClassVar[int] = -20  # an example never wins auto-selection
    capabilities: ClassVar[frozenset[str]] = frozenset()

    @property
    def device_type(self) -> str:
        """``"cpu"``: the virtual devices' tensors and generators are CPU ones."""
        return "cpu"

    def find_device_module(self) -> ModuleType:
        """Return this package's device module instead of asking torch."""
        from hwrng_example_nooffset import device

        return device


@hwrng.hookimpl
def hwrng_platforms() -> Sequence[hwrng.Platform]:
    """Provide the nooffset platform."""
    return [NoOffsetPlatform()]
