"""A software accelerator that follows torch's device-module API.

This module plays the part that ``torch.cuda`` or ``torch.npu`` plays for real
hardware: it has devices, a current device, and one default generator per
device with ``get/set_rng_state`` and ``manual_seed(_all)``. Its devices are
virtual -- each is a CPU :class:`torch.Generator` -- which makes it a stand-in
a vendor can read next to its own device module.

``HWRNG_VCPU_DEVICES`` sets the number of devices (default 2).
"""

from __future__ import annotations

import os

import torch

__all__ = [
    "current_device",
    "default_generators",
    "device_count",
    "get_device_name",
    "get_rng_state",
    "init",
    "initial_seed",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "set_device",
    "set_rng_state",
    "synchronize",
]


def _count() -> int:
    text = os.environ.get("HWRNG_VCPU_DEVICES", "2")
    try:
        count = int(text)
    except ValueError:
        raise RuntimeError(f"HWRNG_VCPU_DEVICES must be an integer, got {text!r}") from None
    if count < 0:
        raise RuntimeError(f"HWRNG_VCPU_DEVICES must be >= 0, got {count}")
    return count


default_generators: tuple[torch.Generator, ...] = tuple(torch.Generator() for _ in range(_count()))
_current = 0


def is_available() -> bool:
    """Whether any virtual device exists."""
    return len(default_generators) > 0


def is_initialized() -> bool:
    """Always ``True``: virtual devices need no initialisation."""
    return True


def init() -> None:
    """Do nothing: virtual devices need no initialisation."""


def device_count() -> int:
    """The number of virtual devices."""
    return len(default_generators)


def _index(device: int | None) -> int:
    index = _current if device is None else device
    if not 0 <= index < len(default_generators):
        raise RuntimeError(
            f"vcpu device {index} does not exist ({len(default_generators)} devices)"
        )
    return index


def current_device() -> int:
    """The index of the current virtual device."""
    return _current


def set_device(device: int) -> None:
    """Make ``device`` the current virtual device."""
    global _current
    _current = _index(device)


def get_device_name(device: int | None = None) -> str:
    """A name for display."""
    return f"vcpu:{_index(device)} (software device)"


def synchronize(device: int | None = None) -> None:
    """Do nothing: virtual devices run synchronously."""
    _index(device)


def get_rng_state(device: int | None = None) -> torch.Tensor:
    """The RNG state of a virtual device, as a CPU uint8 tensor."""
    return default_generators[_index(device)].get_state()


def set_rng_state(state: torch.Tensor, device: int | None = None) -> None:
    """Restore the RNG state of a virtual device."""
    default_generators[_index(device)].set_state(state)


def manual_seed(seed: int) -> None:
    """Seed the current virtual device."""
    default_generators[_current].manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seed every virtual device."""
    for generator in default_generators:
        generator.manual_seed(seed)


def initial_seed() -> int:
    """The seed of the current virtual device."""
    return default_generators[_current].initial_seed()
