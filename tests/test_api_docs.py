"""Meta-tests: the public surface is small and documented, every hook works and is described."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import hwrng
from hwrng import hookspecs
from hwrng._cli import build_parser
from hwrng._registry import Registry

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_MODULES = [
    "hwrng",
    "hwrng.checkpoint",
    "hwrng.hookspecs",
    "hwrng.presets",
    "hwrng.dtensor",
    "hwrng.invariant",
    "hwrng.testing",
    "hwrng.backends.cpu",
    "hwrng_cuda",
    "hwrng_npu",
    "hwrng_conformance",
    "hwrng_conformance.plugin",
    "hwrng_conformance.runner",
    "hwrng_conformance.command",
    "hwrng_conformance.checks",
    "hwrng_conformance.helpers",
]


def _hwrng_modules() -> list[str]:
    """Every module of the package but the trainers'.

    The trainer modules import their trainer, which this environment may lack.
    """
    return ["hwrng"] + [
        m.name
        for m in pkgutil.walk_packages(hwrng.__path__, "hwrng.")
        if not m.name.startswith("hwrng.integrations.")
    ]


def test_implementation_modules_are_private() -> None:
    top_level = {f"hwrng.{m.name}" for m in pkgutil.iter_modules(hwrng.__path__)}
    public = {name for name in top_level if not name.split(".")[-1].startswith("_")}
    assert public == {
        "hwrng.hookspecs",
        "hwrng.cli",  # for plugins' commands: the table printer and exit statuses
        "hwrng.presets",
        "hwrng.dtensor",
        "hwrng.invariant",
        "hwrng.testing",
        "hwrng.verify",  # hwrng.verify, the function, is its public face
        "hwrng.backends",
        "hwrng.checkpoint",  # the checkpoint family, its names also exported by hwrng
        "hwrng.integrations",  # its trainer modules are imported only when asked for
    }


def test_the_distribution_installs_one_import_name() -> None:
    """Everything the root wheel installs lives under ``hwrng``: no backend, no suite."""
    import importlib.metadata

    distribution = importlib.metadata.distribution("hwrng")
    top_level = {
        Path(str(entry.value)).parts[0].split(":")[0].split(".")[0]
        for entry in distribution.entry_points
    }
    assert top_level == {"hwrng"}, distribution.entry_points
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    setuptools = pytest.importorskip("setuptools")
    finder = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]["packages"]["find"]
    packages = {
        package
        for where in finder.get("where", ["."])
        for package in setuptools.find_packages(
            str(ROOT / where), include=finder.get("include", ("*",)), exclude=("tests*",)
        )
    }
    assert "hwrng.backends.cpu" in packages
    assert not any(p.startswith(("hwrng.backends.cuda", "hwrng.backends.npu")) for p in packages)
    assert {package.split(".")[0] for package in packages} == {"hwrng"}


@pytest.mark.parametrize("module_name", _hwrng_modules())
def test_every_module_says_what_it_is_for(module_name: str) -> None:
    if module_name == "hwrng.__main__":
        pytest.skip("running it would start the command line")
    assert inspect.getdoc(importlib.import_module(module_name)), f"{module_name}: no docstring"


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


def test_submodules_are_visible_from_the_package() -> None:
    for name in ("dtensor", "invariant", "presets"):
        assert name in hwrng.__all__ and name in dir(hwrng)
        assert getattr(hwrng, name) is importlib.import_module(f"hwrng.{name}")


def test_every_checkpoint_name_is_exported_by_hwrng() -> None:
    """Both docstrings say so: ``hwrng.checkpoint``'s family is reached from ``hwrng`` too."""
    import hwrng.checkpoint

    for name in hwrng.checkpoint.__all__:
        assert name in hwrng.__all__ and name in dir(hwrng), name
        assert getattr(hwrng, name) is getattr(hwrng.checkpoint, name), name
    from hwrng import OnMismatch

    assert OnMismatch is hwrng.checkpoint.OnMismatch


def test_every_exported_error_is_an_hwrng_error_and_a_builtin() -> None:
    for name in hwrng.__all__:
        value = getattr(hwrng, name)
        if not (inspect.isclass(value) and issubclass(value, Exception)):
            continue
        if issubclass(value, Warning):
            assert value is hwrng.HwrngWarning
            continue
        assert issubclass(value, hwrng.HwrngError), name
        if value not in (hwrng.HwrngError, hwrng.BackendError):  # the two abstract bases
            assert issubclass(value, (ValueError, TypeError, LookupError, RuntimeError)), name


class _BothHooks:
    """A plugin implementing every hook, to show each has an effect."""

    def __init__(self) -> None:
        from hwrng.backends.cpu import CPUPlatform

        class HookPlatform(CPUPlatform):
            name = "hookcheck"
            priority = -100

        self.platform = HookPlatform()

    @hwrng.hookimpl
    def hwrng_platforms(self) -> Sequence[hwrng.Platform]:
        return [self.platform]

    @hwrng.hookimpl
    def hwrng_register_commands(self, subcommands: argparse._SubParsersAction[Any]) -> None:
        command = subcommands.add_parser("hookcheck", help="added by a test plugin")
        command.set_defaults(func=lambda args: 0)


def test_every_hook_has_an_effect_and_is_documented() -> None:
    hooks = sorted(
        name
        for name, _ in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith("hwrng_")
    )
    assert hooks == ["hwrng_platforms", "hwrng_register_commands"]
    registry = Registry(entry_point_group=None)
    plugin = _BothHooks()
    registry.register_plugin(plugin, name="both")
    assert registry.get_platform("hookcheck") is plugin.platform
    assert build_parser(registry).parse_args(["hookcheck"]).func(None) == 0
    guide = (ROOT / "docs" / "conformance.md").read_text()
    for hook in hooks:
        assert f"`{hook}(" in guide, f"docs/conformance.md does not describe {hook}"


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
