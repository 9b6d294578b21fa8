"""The device module of the example: torch's device-module API over generators without offsets.

Each virtual device has one default generator, a CPU :class:`torch.Generator`
(``get_offset`` raises "CPU Generator does not use offset", as OpenReg's
does). ``HWRNG_NOOFFSET_DEVICES`` sets the number of devices (default 2).
"""

from __future__ import annotations

import os

import torch

__all__ = [
    "current_device",
    "default_generators",
    "device_count",
    "get_rng_state",
    "initial_seed",
    "is_available",
    "manual_seed",
    "manual_seed_all",
    "set_device",
    "set_rng_state",
]

default_generators: tuple[torch.Generator, ...] = tuple(
    torch.Generator() for _ in range(int(os.environ.get("HWRNG_NOOFFSET_DEVICES", "2")))
)
_current = 0


def is_available() -> bool:
    """Whether any virtual device exists."""
    return len(default_generators) > 0


def device_count() -> int:
    """The number of virtual devices."""
    return len(default_generators)


def _index(device: int | None) -> int:
    index = _current if device is None else device
    if not 0 <= index < len(default_generators):
        raise RuntimeError(f"nooffset device {index} does not exist")
    return index


def current_device() -> int:
    """The index of the current virtual device."""
    return _current


def set_device(device: int) -> None:
    """Make ``device`` the current virtual device."""
    global _current
    _current = _index(device)


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
