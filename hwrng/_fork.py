"""``fork_rng`` and ``isolate_rng``: run code, then put RNG state back as it was.

:func:`fork_rng` forks torch's generators (the CPU one and the platform's
device generators), like :func:`torch.random.fork_rng`. :func:`isolate_rng`
forks those and Python's ``random`` and NumPy's global generator, like
Lightning's ``isolate_rng``. Neither touches named states
(:class:`~hwrng.RNGStatesTracker` keeps those itself). Both put back the seed
plan in force (:func:`hwrng.current_seeding`) with the generators it seeded,
so DTensor ops after the block draw with the seeds they drew with before it.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch

from hwrng import _recompute as recompute
from hwrng._claims import claim
from hwrng._exceptions import InvalidDeviceError
from hwrng._host import HOST_COUNTER, host_generator
from hwrng._platform import DeviceLike, Platform
from hwrng._registry import platform_in_force
from hwrng._seeding import current_seeding, record_seeding, seeded_mesh
from hwrng._validation import check_flag

__all__ = ["fork_rng", "isolate_rng"]


def _device_indices(platform: Platform, devices: Iterable[DeviceLike] | None) -> list[int]:
    if devices is None:
        return [platform.current_device()]
    if isinstance(devices, (str, torch.device)) or not isinstance(devices, Iterable):
        raise InvalidDeviceError(
            f"devices must be a list of devices, such as [{devices!r}], got {devices!r}"
        )
    return sorted({platform.device_index(device) for device in devices})


@contextlib.contextmanager
def _forked_generators(platform: Platform, indices: list[int]) -> Iterator[None]:
    host = host_generator()
    # A platform whose devices draw from the host generator is covered by the host.
    devices = [] if platform.uses_host_generator else [(i, platform.generator(i)) for i in indices]
    with claim(host, *(g for _, g in devices)):
        plan, mesh = current_seeding(), seeded_mesh()  # the plan goes with its generators
        host_state = host.get_state()
        host_reading = HOST_COUNTER.export(host)
        device_states = [(i, platform.get_rng_state(i)) for i, _ in devices]
        where = recompute.site()
        key = (platform.name, tuple(i for i, _ in devices))
        if where is not None and where.replaying:
            # start where the forward's fork started: torch rewinds only the generators of
            # the checkpoint's own devices, and none with preserve_rng_state=False
            forward_host, forward_reading, forward_devices = where.replay("fork_rng", key)
            host.set_state(forward_host)
            HOST_COUNTER.restore(host, forward_reading)
            for index, state in forward_devices:
                platform.set_rng_state(state, index)
        elif where is not None:
            where.record("fork_rng", key, (host_state, host_reading, device_states))
        try:
            yield
        finally:
            host.set_state(host_state)
            HOST_COUNTER.restore(host, host_reading)
            for index, state in device_states:
                platform.set_rng_state(state, index)
            record_seeding(plan, mesh)


@contextlib.contextmanager
def fork_rng(
    devices: Iterable[DeviceLike] | None = None,
    *,
    platform: Platform | str | None = None,
    enabled: bool = True,
) -> Iterator[None]:
    """Fork torch's CPU generator and device generators; restore them on exit.

    Exactly these come back when the block ends, whether it returns or raises:
    torch's CPU generator, the default generators of ``devices``, and the seed
    plan in force (:func:`hwrng.current_seeding`, which seeding inside the
    block replaces). Python's
    ``random`` and NumPy are not forked (:func:`isolate_rng` forks them too),
    nor are named states. States are copied as CPU tensors only, never through
    device memory. In the recomputation of an activation checkpoint, the block
    starts from the states the forward's block started from (torch rewinds only
    the checkpoint's own devices, and none with ``preserve_rng_state=False``).

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
        the platform in force (the seed plan's, else :func:`hwrng.get_platform`'s choice).
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
    resolved = platform_in_force(platform)
    with _forked_generators(resolved, _device_indices(resolved, devices)):
        yield


@contextlib.contextmanager
def isolate_rng(
    devices: Iterable[DeviceLike] | None = None, *, platform: Platform | str | None = None
) -> Iterator[None]:
    """Fork every global RNG hwrng seeds: torch CPU, devices, ``random`` and NumPy.

    What :func:`fork_rng` forks (the seed plan included), plus Python's
    ``random`` and NumPy's legacy global generator, all restored on exit and
    on exception. Named states
    (:class:`~hwrng.RNGStatesTracker`) are not touched. In the recomputation
    of an activation checkpoint, ``random`` and NumPy start where the forward's
    block found them (torch's checkpoint never rewinds them).

    Parameters
    ----------
    devices, platform
        As for :func:`fork_rng`.

    Examples
    --------
    >>> import random, hwrng
    >>> with hwrng.isolate_rng(platform="cpu"):
    ...     _ = random.random()  # random, NumPy and torch come back afterwards
    """
    resolved = platform_in_force(platform)
    indices = _device_indices(resolved, devices)
    python_state = random.getstate()
    numpy_state: Any = np.random.get_state()
    where = recompute.site()
    if where is not None and where.replaying:
        # torch's checkpoint never rewinds Python's random or NumPy: start where the forward did
        forward_python, forward_numpy = where.replay("isolate_rng", resolved.name)
        random.setstate(forward_python)
        np.random.set_state(forward_numpy)
    elif where is not None:
        where.record("isolate_rng", resolved.name, (python_state, numpy_state))
    try:
        with _forked_generators(resolved, indices):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
