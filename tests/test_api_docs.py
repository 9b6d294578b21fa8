"""Meta-tests: every public name is documented, every hook tested and described."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import hwrng
from hwrng import hookspecs

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_MODULES = [
    "hwrng",
    "hwrng.counters",
    "hwrng.errors",
    "hwrng.fork",
    "hwrng.hookspecs",
    "hwrng.platform",
    "hwrng.presets",
    "hwrng.registry",
    "hwrng.seeding",
    "hwrng.sharding",
    "hwrng.states",
    "hwrng.tracker",
    "hwrng.validation",
    "hwrng.workers",
    "hwrng.dtensor",
    "hwrng.cli",
    "hwrng_cpu",
    "hwrng_cuda",
    "hwrng_npu",
    "hwrng_conformance",
    "hwrng_conformance.plugin",
    "hwrng_conformance.multiproc",
    "hwrng_conformance.runner",
    "hwrng_conformance.checks",
    "hwrng_conformance.helpers",
]


def test_the_module_list_is_complete() -> None:
    found = {"hwrng"} | {f"hwrng.{m.name}" for m in pkgutil.iter_modules(hwrng.__path__)}
    assert found - {"hwrng.__main__", "hwrng.version"} <= set(PUBLIC_MODULES)


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_has_a_docstring(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert inspect.getdoc(module), f"{module_name} has no module docstring"
    for name in getattr(module, "__all__", []):
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"{module_name}.{name} has no docstring"
        if inspect.isclass(value) and value.__module__.startswith(
            module_name.split(".", maxsplit=1)[0]
        ):
            for member_name, member in vars(value).items():
                if member_name.startswith("_") or not callable(getattr(member, "__func__", member)):
                    continue
                assert inspect.getdoc(member), (
                    f"{module_name}.{name}.{member_name} has no docstring"
                )


def test_every_hook_is_tested_and_documented() -> None:
    hooks = [
        name
        for name, _ in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith("hwrng_")
    ]
    assert hooks == ["hwrng_platforms"]
    tests = "".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    readme = (ROOT / "README.md").read_text()
    for hook in hooks:
        assert f"def {hook}(" in tests, f"no test implements {hook}"
        assert hook in readme, f"README does not describe {hook}"


def test_every_issue_contract_name_is_exported() -> None:
    contract = [
        "get_platform",
        "list_platforms",
        "register_plugin",
        "hookimpl",
        "Platform",
        "DeviceModulePlatform",
        "BackendNotFoundError",
        "BackendUnavailableError",
        "rank_seed",
        "seed_plan",
        "manual_seed",
        "worker_init_fn",
        "fork_rng",
        "ShardSpec",
        "shard_offsets",
        "OffsetTracker",
        "RNGStatesTracker",
    ]
    for name in contract:
        assert name in hwrng.__all__ and getattr(hwrng, name) is not None
    assert callable(hwrng.dtensor.install) and callable(hwrng.dtensor.uninstall)
    assert hwrng.presets.megatron_manual_seed is not None
