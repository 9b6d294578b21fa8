"""Capability profiles: what a backend's device and generators have, as the verdict reports it.

PyTorch's accelerator tests let a vendor declare what its device lacks and
run the rest; these profiles do the same for hwrng's rules, and the verdict
names the profile a backend was checked under:

``float64`` / ``no-float64``
    Whether the device computes in float64 (Ascend's kernels reject double,
    MPS has none). Found by running a float64 op on the device, or forced
    with ``--hwrng-profile no-float64``. Under ``no-float64`` the rules that
    need float64 results are skipped, saying so; every float32, float16 and
    bfloat16 invariant op runs with float64 refused under *every* profile.
``offsets`` / ``no-offsets``
    Whether the backend's generators have an offset API
    (``Generator.get_offset``): optional in PyTorch's accelerator guide, and
    absent in its reference PrivateUse1 backend, OpenReg, whose generator
    derives from the CPU's. Found by asking the generator. hwrng emulates the
    counter of such a generator (see ``hwrng.DeviceModulePlatform``): every
    rule runs the same, and the invariant ops draw the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import hwrng

__all__ = ["PROFILE_OPTIONS", "Profile", "detect_profile"]

#: what ``--hwrng-profile`` accepts
PROFILE_OPTIONS = ("no-float64",)


@dataclass(frozen=True)
class Profile:
    """A backend's capability profile.

    Attributes
    ----------
    float64
        The rules may use float64 on the device.
    offsets
        The generators have an offset API of their own.
    forced
        Why ``float64`` is off although the device has it (``--hwrng-profile``), if so.
    """

    float64: bool
    offsets: bool
    forced: bool = False

    @property
    def label(self) -> str:
        """``"float64, offsets"``, ``"no-float64 (asked for), no-offsets"``, ..."""
        float64 = "float64" if self.float64 else "no-float64"
        if self.forced:
            float64 += " (asked for)"
        return f"{float64}, {'offsets' if self.offsets else 'no-offsets'}"


def detect_profile(platform: hwrng.Platform, asked: set[str]) -> Profile:
    """Find ``platform``'s profile on this machine; ``asked`` forces profiles on (no-float64)."""
    device_float64 = _runs_float64(platform.device())
    forced = "no-float64" in asked and device_float64
    return Profile(
        float64=device_float64 and "no-float64" not in asked,
        offsets=_has_offsets(platform.generator()),
        forced=forced,
    )


def _runs_float64(device: torch.device) -> bool:
    try:
        value = (torch.ones(2, dtype=torch.float64, device=device) * 1.5).sum()
        return float(value.cpu()) == 3.0
    except (RuntimeError, TypeError, NotImplementedError):
        return False


def _has_offsets(generator: torch.Generator) -> bool:
    try:
        generator.get_offset()
    except (RuntimeError, NotImplementedError, AttributeError):
        return False
    return True
