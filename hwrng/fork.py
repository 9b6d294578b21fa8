"""``fork_rng``: run code and put every RNG it touched back as it was."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch

from hwrng.errors import InvalidDeviceError
from hwrng.platform import DeviceLike, Platform
from hwrng.registry import resolve_platform
from hwrng.validation import check_flag

__all__ = ["fork_rng"]


@contextlib.contextmanager
def fork_rng(
    devices: Iterable[DeviceLike] | None = None,
    *,
    platform: Platform | str | None = None,
    enabled: bool = True,
) -> Iterator[None]:
    """Fork torch's CPU generator and device generators; restore them on exit.

    The states are restored when the block ends, whether it returns or raises.
    States are copied as CPU tensors only, never through device memory.

    Parameters
    ----------
    devices
        The devices of ``platform`` whose default generators to fork. By
        default only the platform's current device: unlike
        :func:`torch.random.fork_rng`, which forks every visible device (and
        warns when there are many), hwrng forks what a rank normally uses.
        Pass ``range(platform.device_count())`` to fork them all.
    platform
        A :class:`~hwrng.Platform`, a platform name, or ``None`` for
        :func:`hwrng.get_platform`'s choice.
    enabled
        ``False`` makes the context manager do nothing, to switch forking off
        without re-indenting code.

    Raises
    ------
    InvalidDeviceError
        If a device is not one of the platform's (checked before anything is saved).

    Examples
    --------
    >>> import torch, hwrng
    >>> with hwrng.fork_rng(platform="cpu"):
    ...     _ = torch.rand(3)  # draws here do not move the generators outside
    """
    if not check_flag(enabled, "enabled"):
        yield
        return
    resolved = resolve_platform(platform)
    if devices is None:
        indices = [resolved.current_device()]
    else:
        if isinstance(devices, (str, torch.device)) or not isinstance(devices, Iterable):
            raise InvalidDeviceError(
                f"devices must be a list of devices, such as [{devices!r}], got {devices!r}"
            )
        indices = sorted({resolved.device_index(device) for device in devices})
    cpu_state = torch.default_generator.get_state()
    # A device whose default generator is torch's CPU generator is covered by cpu_state.
    device_states = [
        (index, resolved.get_rng_state(index))
        for index in indices
        if resolved.generator(index) is not torch.default_generator
    ]
    try:
        yield
    finally:
        torch.default_generator.set_state(cpu_state)
        for index, state in device_states:
            resolved.set_rng_state(state, index)
