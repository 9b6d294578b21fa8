"""What a Platform says of itself: the host generator, its current device, ranks per device.

The core asks these instead of comparing device names; the example's software
device (``examples/hwrng-example-vcpu``, several virtual devices over CPU
generators of their own) is the platform that tells them apart from the CPU's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

import hwrng
from hwrng._registry import Registry
from hwrng.backends.cpu import CPUPlatform

REPOSITORY = Path(__file__).resolve().parents[1]
EXAMPLE_SOURCE = REPOSITORY / "examples" / "hwrng-example-vcpu" / "src"


@pytest.fixture
def vcpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[hwrng.Platform]:
    """The example's platform with three virtual devices, imported afresh from the source."""
    monkeypatch.setenv("HWRNG_VCPU_DEVICES", "3")
    monkeypatch.syspath_prepend(str(EXAMPLE_SOURCE))
    for name in [m for m in sys.modules if m.startswith("hwrng_example_vcpu")]:
        monkeypatch.delitem(sys.modules, name)
    from hwrng_example_vcpu import VCPUPlatform

    yield VCPUPlatform()
    for name in [m for m in sys.modules if m.startswith("hwrng_example_vcpu")]:
        del sys.modules[name]  # monkeypatch puts back any that were there before


def test_the_cpu_draws_from_the_host_generator_and_a_software_device_does_not(
    vcpu: hwrng.Platform,
) -> None:
    cpu = hwrng.get_platform("cpu")
    assert cpu.uses_host_generator
    assert cpu.generator() is torch.default_generator
    # same device type as the host, generators of its own
    assert vcpu.device_type == torch.default_generator.device.type
    assert not vcpu.uses_host_generator
    assert all(vcpu.generator(i) is not torch.default_generator for i in range(3))


def test_seeding_a_software_device_seeds_each_of_its_devices(
    vcpu: hwrng.Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")  # seeding sets it: put it back afterwards
    with hwrng.isolate_rng(platform="cpu"):
        hwrng.seed_everything(41, platform=vcpu)
        positions = {vcpu.get_seed_offset(vcpu.generator(i)) for i in range(3)}
        host = hwrng.get_platform("cpu").get_seed_offset(torch.default_generator)
    assert positions == {(41, 0)} and host == (41, 0)


def test_set_device_binds_the_process_to_a_device(vcpu: hwrng.Platform) -> None:
    assert vcpu.current_device() == 0
    vcpu.set_device(2)
    assert vcpu.current_device() == 2
    vcpu.set_device(torch.device(vcpu.device_type, 1))
    assert vcpu.current_device() == 1
    for bad in (3, -1, "cuda:0", True):
        with pytest.raises(hwrng.InvalidDeviceError):
            vcpu.set_device(bad)  # type: ignore[arg-type]
        assert vcpu.current_device() == 1, "a refused device changes nothing"


def test_set_device_on_the_cpu_accepts_its_one_device_only() -> None:
    cpu = hwrng.get_platform("cpu")
    cpu.set_device(0)
    cpu.set_device("cpu")
    with pytest.raises(hwrng.InvalidDeviceError):
        cpu.set_device(1)


def test_an_unavailable_platform_refuses_set_device() -> None:
    class Absent(CPUPlatform):
        name: ClassVar[str] = "absent"

        def unavailable_reason(self) -> str | None:
            return "not here"

    with pytest.raises(hwrng.BackendUnavailableError, match="not here"):
        Absent().set_device(0)


class Ranked(CPUPlatform):
    """Two devices that need a rank each, as an accelerator's do."""

    name: ClassVar[str] = "ranked"
    dist_backend: ClassVar[str] = "rankedccl"
    one_rank_per_device: ClassVar[bool] = True

    def device_count(self) -> int:
        return 2


def test_one_rank_per_device_defaults() -> None:
    assert hwrng.Platform.one_rank_per_device is True, "the safe answer for an accelerator"
    assert hwrng.DeviceModulePlatform.one_rank_per_device is True
    assert hwrng.get_platform("cpu").one_rank_per_device is False


@pytest.mark.parametrize(
    ("platform", "ranks", "expected"),
    [
        (CPUPlatform(), 1, "gloo"),
        (CPUPlatform(), 64, "gloo"),
        (Ranked(), 1, "rankedccl"),
        (Ranked(), 2, "rankedccl"),
        (Ranked(), 3, "gloo"),  # more ranks than devices: the host backend
    ],
)
def test_collective_backend(platform: hwrng.Platform, ranks: int, expected: str) -> None:
    assert hwrng.collective_backend(platform, ranks) == expected


def test_collective_backend_of_a_software_device_needs_no_device_per_rank(
    vcpu: hwrng.Platform,
) -> None:
    assert hwrng.collective_backend(vcpu, 16) == vcpu.dist_backend


@pytest.mark.parametrize("ranks", [0, -1, True, 2.0, "2"])
def test_collective_backend_refuses_a_bad_count(ranks: Any) -> None:
    with pytest.raises(hwrng.InvalidValueError):
        hwrng.collective_backend(CPUPlatform(), ranks)


def test_a_backend_sets_its_counter_view_by_class_attribute(vcpu: hwrng.Platform) -> None:
    assert type(vcpu).counter_type is hwrng.MersenneCounter  # type: ignore[attr-defined]
    assert isinstance(vcpu.counter, hwrng.MersenneCounter)
    assert vcpu.counter is not hwrng.host_counter(), "its own memo, not the host generator's"
    # the default serves each generator as it is: native offsets, else its state's layout
    from hwrng._device_counter import DeviceCounter

    assert hwrng.DeviceModulePlatform.counter_type is DeviceCounter


def test_the_final_methods_are_the_ones_marked_final() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("typing.final marks functions (__final__) from Python 3.11")
    marked = {
        name
        for name, member in vars(hwrng.Platform).items()
        if getattr(getattr(member, "fget", member), "__final__", False)
    }
    assert marked == set(hwrng.Platform.final_methods)


class Overriding(CPUPlatform):
    name: ClassVar[str] = "overriding"
    priority: ClassVar[int] = -50

    def manual_seed(self, seed: int, device: hwrng.DeviceLike = None) -> None:  # type: ignore[misc]
        torch.default_generator.manual_seed(seed)  # no check: what the final marker prevents


class Hooked(CPUPlatform):
    """Overrides what a backend may: the members the final methods call."""

    name: ClassVar[str] = "hooked"
    priority: ClassVar[int] = -50

    def seed_device(self, seed: int, device: hwrng.DeviceLike = None) -> None:
        super().seed_device(seed, device)


class _Provides:
    def __init__(self, platform: hwrng.Platform) -> None:
        self.platform = platform

    @hwrng.hookimpl
    def hwrng_platforms(self) -> Sequence[hwrng.Platform]:
        return [self.platform]


def test_the_registry_refuses_a_platform_that_overrides_a_final_method() -> None:
    registry = Registry(entry_point_group=None)
    registry.register_plugin(_Provides(Overriding()), name="overriding-plugin")
    registry.register_plugin(_Provides(Hooked()), name="hooked-plugin")
    (broken,) = registry.broken_plugins
    assert broken.plugin == "overriding-plugin" and broken.stage == "hook"
    assert "overrides manual_seed, which hwrng.Platform marks final" in broken.error
    assert registry.get_platform("hooked").name == "hooked"
    with pytest.raises(hwrng.InvalidSeedError):
        registry.get_platform("hooked").manual_seed(-1)


QUIET = ["--no-error-summary", "acme.py"]

MYPY_CONFIG = """
[mypy]
[mypy-hwrng.*]
ignore_errors = True
[mypy-torch.*,numpy.*,pluggy.*,packaging.*]
follow_imports = skip
"""

VENDOR = """
import hwrng


class AcmePlatform(hwrng.DeviceModulePlatform):
    name = "acme"
    dist_backend = "acmeccl"

    def {method}(self, seed: int, device: hwrng.DeviceLike = None) -> None:
        pass
"""


@pytest.mark.parametrize("method", ["manual_seed", "seed_device"])
def test_mypy_tells_a_vendor_who_overrides_a_final_method(tmp_path: Path, method: str) -> None:
    pytest.importorskip("mypy")
    (tmp_path / "mypy.ini").write_text(MYPY_CONFIG)
    (tmp_path / "acme.py").write_text(textwrap.dedent(VENDOR.format(method=method)))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir", "cache", *QUIET],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "MYPYPATH": str(REPOSITORY)},
        timeout=300,
    )
    if method == "manual_seed":
        assert result.returncode == 1, result.stdout + result.stderr
        assert 'Cannot override final attribute "manual_seed"' in result.stdout
    else:
        assert result.returncode == 0, result.stdout + result.stderr
