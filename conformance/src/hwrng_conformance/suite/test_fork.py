"""Rules for fork_rng: every forked generator comes back, on exit and on exception."""

from __future__ import annotations

import pytest
import torch

import hwrng
from hwrng_conformance.helpers import draw_default


def _expected(platform: hwrng.Platform) -> tuple[torch.Tensor, torch.Tensor]:
    cpu_state = torch.get_rng_state()
    device_state = platform.get_rng_state()
    expected = (torch.rand(8), draw_default(platform))
    torch.set_rng_state(cpu_state)
    platform.set_rng_state(device_state)
    return expected


def test_fork_rng_restores_on_exit(platform: hwrng.Platform) -> None:
    platform.manual_seed(3)
    torch.manual_seed(3)
    cpu_next, device_next = _expected(platform)
    with hwrng.fork_rng(platform=platform):
        torch.rand(100)
        draw_default(platform, count=100)
        platform.manual_seed(12345)
    assert torch.equal(torch.rand(8), cpu_next)
    assert torch.equal(draw_default(platform), device_next)


def test_fork_rng_restores_on_exception(platform: hwrng.Platform) -> None:
    platform.manual_seed(4)
    cpu_next, device_next = _expected(platform)
    with pytest.raises(ZeroDivisionError), hwrng.fork_rng(platform=platform):
        torch.rand(100)
        draw_default(platform, count=100)
        raise ZeroDivisionError
    assert torch.equal(torch.rand(8), cpu_next)
    assert torch.equal(draw_default(platform), device_next)


def test_fork_rng_disabled_forks_nothing(platform: hwrng.Platform) -> None:
    platform.manual_seed(5)
    with hwrng.fork_rng(platform=platform, enabled=False):
        inside = draw_default(platform)
    after = draw_default(platform)
    assert not torch.equal(after, inside), "a disabled fork must not restore the generator"


def test_fork_rng_refuses_unknown_devices(platform: hwrng.Platform) -> None:
    with (
        pytest.raises(hwrng.InvalidDeviceError),
        hwrng.fork_rng([platform.device_count()], platform=platform),
    ):
        pass  # pragma: no cover - never entered
