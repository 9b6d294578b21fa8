"""fork_rng on the CPU backend and with an explicit device list."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hwrng


def test_fork_by_name_and_by_platform(cpu: hwrng.Platform) -> None:
    torch.manual_seed(1)
    state = torch.get_rng_state()
    for platform in ("cpu", cpu, None):
        with hwrng.fork_rng(platform=platform):
            torch.rand(10)
        assert torch.equal(torch.get_rng_state(), state)


def test_explicit_devices_are_checked_before_anything(cpu: hwrng.Platform) -> None:
    with hwrng.fork_rng([0, "cpu", torch.device("cpu")], platform=cpu):
        torch.rand(2)
    for bad in ([1], ["cuda:0"], [None, 5]):
        with pytest.raises(hwrng.InvalidDeviceError), hwrng.fork_rng(bad, platform=cpu):
            pass  # pragma: no cover - never entered


def test_unknown_platform(cpu: hwrng.Platform) -> None:
    with pytest.raises(hwrng.BackendNotFoundError), hwrng.fork_rng(platform="nope"):
        pass  # pragma: no cover - never entered


def test_devices_must_be_a_list_and_enabled_a_bool(cpu: hwrng.Platform) -> None:
    for devices in ("cpu", 0, torch.device("cpu")):
        with (
            pytest.raises(hwrng.InvalidDeviceError, match="devices must be a list"),
            hwrng.fork_rng(devices, platform=cpu),  # type: ignore[arg-type]
        ):
            pass  # pragma: no cover - never entered
    with (
        pytest.raises(TypeError, match="enabled must be True or False"),
        hwrng.fork_rng(platform=cpu, enabled="false"),  # type: ignore[arg-type]
    ):
        pass  # pragma: no cover - never entered


def test_isolate_rng_restores_random_and_numpy(cpu: hwrng.Platform) -> None:
    import random

    hwrng.manual_seed(9, platform=cpu)
    expected = (random.random(), float(np.random.rand()), torch.rand(2))
    hwrng.manual_seed(9, platform=cpu)
    with pytest.raises(KeyError), hwrng.isolate_rng(platform=cpu):
        random.random(), np.random.rand(), torch.rand(7)
        raise KeyError("inside")
    assert (random.random(), float(np.random.rand())) == expected[:2]
    assert torch.equal(torch.rand(2), expected[2])
    with hwrng.fork_rng(platform=cpu):
        random.random()
    assert random.random() != expected[0], "fork_rng, as documented, leaves random alone"
