"""Rules for what a platform says of itself: the host generator, its current device, ranks."""

from __future__ import annotations

import pytest
import torch

import hwrng
from hwrng_conformance.helpers import draw_default


def test_devices_draw_from_the_host_generator_all_or_none(platform: hwrng.Platform) -> None:
    host = torch.default_generator
    shared = [platform.generator(i) is host for i in range(platform.device_count())]
    assert shared == [platform.uses_host_generator] * len(shared), shared
    if platform.uses_host_generator:  # one view of the host generator, or positions disagree
        assert platform.counter is hwrng.host_counter()


def test_set_device_selects_each_device(platform: hwrng.Platform) -> None:
    start = platform.current_device()
    try:
        for index in reversed(range(platform.device_count())):
            platform.set_device(index)
            assert platform.current_device() == index
            assert platform.generator() is platform.generator(index)
            platform.manual_seed(100 + index)
            assert platform.get_seed_offset(platform.generator(index)) == (100 + index, 0)
    finally:
        platform.set_device(start)
    assert platform.current_device() == start


def test_set_device_refuses_a_device_it_lacks(platform: hwrng.Platform) -> None:
    start = platform.current_device()
    platform.manual_seed(7)
    expected = draw_default(platform)
    platform.manual_seed(7)
    for bad in (platform.device_count(), -1):
        with pytest.raises(hwrng.InvalidDeviceError):
            platform.set_device(bad)
    assert platform.current_device() == start
    assert torch.equal(draw_default(platform), expected), "a refused device changed a generator"


def test_its_backend_serves_a_rank_on_each_device(platform: hwrng.Platform) -> None:
    # The multi-process rules then run --hwrng-nproc ranks on collective_backend's choice:
    # the platform's own backend too where one_rank_per_device is False.
    assert isinstance(platform.one_rank_per_device, bool)
    assert hwrng.collective_backend(platform, platform.device_count()) == platform.dist_backend
