"""Giving this rank its streams back: :func:`load_state_dict` and carrying out a checked verdict.

Every check runs first (``_checks``); only then does anything change, all
under the generators' claims, so a refused state leaves every generator,
``random``, NumPy, every named state and the plan as they were.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from hwrng._claims import claim
from hwrng._host import HOST_COUNTER, host_generator
from hwrng._platform import Platform
from hwrng._registry import platform_in_force
from hwrng._seeding import record_seeding
from hwrng.checkpoint._capture import device_generators
from hwrng.checkpoint._checks import OnMismatch, Restore, check_on_mismatch, verdict
from hwrng.checkpoint._reseed import Reseed, carry_out_reseed

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["carry_out", "load_state_dict"]


def _apply(restore: Restore, platform: Platform) -> None:
    host = host_generator()
    devices = device_generators(platform)
    with claim(host, *devices):
        random.setstate(restore.python)
        np.random.set_state(restore.numpy)
        host.set_state(restore.torch_cpu)
        HOST_COUNTER.restore(host, restore.host_reading)
        for generator, state in zip(devices, restore.devices, strict=True):
            generator.set_state(state)
        if restore.pythonhashseed is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = restore.pythonhashseed
        for tracker, states in restore.trackers.values():
            tracker.set_states(states)
        record_seeding(restore.plan)


def carry_out(checked: Restore | Reseed, platform: Platform, mesh: DeviceMesh | None) -> None:
    """Apply a checked verdict to this rank: restore its streams, or re-derive them."""
    if isinstance(checked, Reseed):
        carry_out_reseed(checked, platform, mesh)
    else:
        _apply(checked, platform)


def load_state_dict(
    document: Mapping[str, Any],
    *,
    on_mismatch: OnMismatch = "error",
    mesh: DeviceMesh | None = None,
    platform: Platform | str | None = None,
) -> None:
    """Restore this rank's RNG state from :func:`hwrng.state_dict`, bit for bit, or refuse.

    Every check runs before anything changes: a refused state leaves every
    generator, ``random``, NumPy, every named state and the plan as they were.
    Every value is checked as a fresh argument would be (seeds, offsets, state
    sizes), whether or not the digest matches.

    Parameters
    ----------
    document
        What :func:`hwrng.state_dict` returned (e.g. after ``torch.load(weights_only=True)``).
    on_mismatch
        ``"error"`` (default): refuse a state written by another backend, rank,
        world size, mesh or device count. ``"reseed"``: in those cases re-derive
        every stream from the saved seed plan for the new ``mesh`` instead (as
        :func:`hwrng.manual_seed` would), continue the default generator at the
        saved DTensor position, and warn (:class:`~hwrng.HwrngWarning`); named
        states stay as they are.
    mesh
        The new mesh, for ``on_mismatch="reseed"``.
    platform
        Whose devices to restore; by default the platform in force (the plan's,
        else :func:`hwrng.get_platform`'s choice)
        (a state from another backend is refused, naming both).

    Raises
    ------
    CheckpointError
        Naming what differs or what is corrupt, before anything changes.
    """
    check_on_mismatch(on_mismatch)
    resolved = platform_in_force(platform)
    carry_out(verdict(document, on_mismatch, mesh, resolved), resolved, mesh)
