"""The DTensor adapter's install checks, in one process."""

from __future__ import annotations

from typing import ClassVar

import pytest
from hwrng_cpu import CPUPlatform
from torch.distributed.tensor import _random

import hwrng
from hwrng import dtensor


@pytest.fixture(autouse=True)
def _clean() -> object:
    before = _random._rng_tracker
    yield
    dtensor.uninstall()
    assert _random._rng_tracker is before


def test_install_uninstall_round_trip() -> None:
    assert dtensor.installed_platform() is None
    assert dtensor.uninstall() is False
    dtensor.install("cpu")
    tracker = _random._rng_tracker
    assert isinstance(tracker, _random.OffsetBasedRNGTracker)
    assert dtensor.installed_platform() is hwrng.get_platform("cpu")
    dtensor.install("cpu")  # again: replaced, and uninstall still restores the original
    assert dtensor.uninstall() is True
    assert dtensor.installed_platform() is None


def test_platform_without_the_capability_is_refused() -> None:
    class NoDTensor(CPUPlatform):
        capabilities: ClassVar[frozenset[str]] = frozenset()

    with pytest.raises(hwrng.DTensorHookError, match="does not have the 'dtensor' capability"):
        dtensor.install(NoDTensor())
    assert dtensor.installed_platform() is None


def test_a_different_hook_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand in for a torch whose tracker hook changed shape."""

    def _distribute_region(self: object, device_mesh: object, placements: object) -> None:
        raise AssertionError("never called")

    monkeypatch.setattr(_random.OffsetBasedRNGTracker, "_distribute_region", _distribute_region)
    with pytest.raises(
        hwrng.DTensorHookError, match=r"_distribute_region takes \['self', 'device_mesh'"
    ):
        dtensor.install("cpu")


def test_an_old_torch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dtensor.torch, "__version__", "2.3.1")
    with pytest.raises(hwrng.DTensorHookError, match=r"needs torch >= 2\.9, found 2\.3\.1"):
        dtensor.install("cpu")
