"""The plugin registry: selection, overrides, and plugins that misbehave."""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pluggy
import pytest
import torch
from helpers import hwrng_backends

import hwrng
from hwrng._registry import Registry
from hwrng.backends.cpu import CPUPlatform


class Accelerator(CPUPlatform):
    """A platform for registry tests: the CPU's behaviour under another name."""

    name: ClassVar[str] = "accel"
    priority: ClassVar[int] = 100
    reason: str | None = None

    def unavailable_reason(self) -> str | None:
        return self.reason


def make(name: str, priority: int = 100, reason: str | None = None) -> Accelerator:
    platform_type = type(
        f"{name.title()}Platform", (Accelerator,), {"name": name, "priority": priority}
    )
    platform = platform_type()
    platform.reason = reason
    return platform


class Plugin:
    def __init__(self, *platforms: hwrng.Platform) -> None:
        self.platforms = platforms

    @hwrng.hookimpl
    def hwrng_platforms(self) -> Sequence[hwrng.Platform]:
        return self.platforms


class RaisingPlugin:
    @hwrng.hookimpl
    def hwrng_platforms(self) -> Sequence[hwrng.Platform]:
        raise RuntimeError("driver exploded")


class WrongTypePlugin:
    @hwrng.hookimpl
    def hwrng_platforms(self) -> Sequence[object]:
        return ["not a platform"]


def registry_with(*plugins: object) -> Registry:
    registry = Registry(entry_point_group=None)
    for index, plugin in enumerate(plugins):
        registry.register_plugin(plugin, name=f"p{index}")
    return registry


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HWRNG_BACKEND", raising=False)
    monkeypatch.delenv("HWRNG_DISABLE_PLUGINS", raising=False)


def test_builtins_are_found_through_entry_points() -> None:
    registry = Registry()
    assert registry.names() == ["cpu", "cuda", "npu"]
    rows = {row.name: row for row in registry.list_platforms()}
    assert rows["cpu"].available and rows["cpu"].device_count == 1
    assert (rows["cpu"].distribution, rows["cpu"].plugin) == ("hwrng", "cpu")
    assert rows["cpu"].version == hwrng.__version__
    assert not rows["cuda"].available and rows["cuda"].reason
    assert rows["npu"].status == "unavailable" and "torch_npu is not installed" in str(
        rows["npu"].reason
    )
    assert registry.get_platform().name == "cpu"


def test_auto_selects_the_highest_available_priority() -> None:
    registry = registry_with(
        Plugin(make("low", 1), make("high", 50), make("best", 90, reason="no device"))
    )
    assert registry.get_platform().name == "high"


def test_ties_are_refused() -> None:
    registry = registry_with(Plugin(make("a", 10), make("b", 10)))
    with pytest.raises(
        hwrng.AmbiguousBackendError, match="a, b are all available with priority 10"
    ):
        registry.get_platform()
    assert registry.get_platform("a").name == "a"


def test_nothing_available() -> None:
    registry = registry_with(Plugin(make("a", reason="unplugged")))
    with pytest.raises(hwrng.BackendUnavailableError, match="a: unplugged"):
        registry.get_platform()


def test_names_devices_and_torch_devices() -> None:
    registry = registry_with(Plugin(make("accel"), CPUPlatform()))
    assert registry.get_platform("accel").name == "accel"
    assert registry.get_platform("accel:0").name == "accel"
    assert registry.get_platform("cpu:0").name == "cpu"
    with pytest.raises(hwrng.InvalidDeviceError, match="index 1 is out of range"):
        registry.get_platform("accel:1")
    with pytest.raises(hwrng.InvalidDeviceError, match="does not end in a device index"):
        registry.get_platform("accel:x")

    assert registry.get_platform(torch.device("cpu")).name == "cpu"
    with pytest.raises(TypeError, match="must be a name"):
        registry.get_platform(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty backend name"):
        registry.get_platform(":1")


def test_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = registry_with(Plugin(make("fast", 100), make("slow", 1)))
    monkeypatch.setenv("HWRNG_BACKEND", "slow")
    assert registry.get_platform().name == "slow"
    assert registry.get_platform("fast").name == "fast", "an explicit name wins over the variable"
    monkeypatch.setenv("HWRNG_BACKEND", "missing")
    with pytest.raises(hwrng.BackendNotFoundError, match="'missing'"):
        registry.get_platform()


def test_unknown_name_lists_the_known_ones() -> None:
    registry = registry_with(Plugin(make("x"), make("y")))
    with pytest.raises(hwrng.BackendNotFoundError) as caught:
        registry.get_platform("z")
    assert caught.value.known == ["x", "y"]
    assert "known backends: x, y" in str(caught.value)
    assert isinstance(caught.value, LookupError)


def test_unavailable_backend_carries_its_reason() -> None:
    registry = registry_with(Plugin(make("x", reason="driver 999 too old")))
    with pytest.raises(hwrng.BackendUnavailableError) as caught:
        registry.get_platform("x")
    assert caught.value.reason == "driver 999 too old"
    assert "driver 999 too old" in str(caught.value)


def test_duplicate_names_are_an_error_naming_both() -> None:
    registry = registry_with(Plugin(make("dup")), Plugin(make("dup")), Plugin(make("solo", 1)))
    with pytest.raises(hwrng.DuplicateBackendError) as caught:
        registry.get_platform("dup")
    assert caught.value.providers == ["plugin 'p0' (in-process)", "plugin 'p1' (in-process)"]
    with pytest.raises(hwrng.DuplicateBackendError):
        registry.get_platform()  # the duplicated name would win auto-selection
    rows = [r for r in registry.list_platforms() if r.name == "dup"]
    assert [r.status for r in rows] == ["conflict", "conflict"]
    assert "also provided by plugin 'p1'" in str(rows[0].reason)


def test_broken_hooks_are_listed_and_do_not_stop_others() -> None:
    registry = registry_with(RaisingPlugin(), Plugin(make("ok")), WrongTypePlugin())
    assert registry.get_platform("ok").name == "ok"
    broken = {b.plugin: b for b in registry.broken_plugins}
    assert broken["p0"].stage == "hook" and "driver exploded" in broken["p0"].error
    assert "not a hwrng.Platform" in broken["p2"].error
    rows = {r.name: r for r in registry.list_platforms()}
    assert rows["p0"].broken and "hook failed: RuntimeError: driver exploded" in str(
        rows["p0"].reason
    )
    assert rows["ok"].available


def test_probe_that_raises_is_reported_not_raised() -> None:
    class Exploding(Accelerator):
        name: ClassVar[str] = "boom"

        def unavailable_reason(self) -> str | None:
            raise OSError("device node vanished")

    registry = registry_with(Plugin(Exploding()))
    row = registry.list_platforms()[0]
    assert row.status == "unavailable" and "OSError: device node vanished" in str(row.reason)


def test_register_and_unregister() -> None:
    registry = Registry(entry_point_group=None)
    plugin = Plugin(make("tmp"))
    name = registry.register_plugin(plugin)
    try:
        assert registry.get_platform("tmp").name == "tmp"
        with pytest.raises(hwrng.InvalidValueError, match="already registered"):
            registry.register_plugin(Plugin(), name=name)
    finally:
        registry.unregister_plugin(plugin)
    with pytest.raises(hwrng.BackendNotFoundError):
        registry.get_platform("tmp")
    with pytest.raises(hwrng.InvalidValueError, match="is not a registered"):
        registry.unregister_plugin(plugin)
    with pytest.raises(hwrng.InvalidValueError, match="no hwrng plugin named"):
        registry.unregister_plugin("nothing")
    registry.register_plugin(plugin, name="again")
    registry.unregister_plugin("again")


def test_register_rejects_invalid_hooks() -> None:
    class BadSignature:
        @hwrng.hookimpl
        def hwrng_platforms(self, unexpected: int) -> list[hwrng.Platform]:
            return []

    class UnknownHook:
        @hwrng.hookimpl
        def hwrng_unknown(self) -> None:
            return None

    registry = Registry(entry_point_group=None)
    with pytest.raises(hwrng.InvalidArgumentError, match="hook specifications") as caught:
        registry.register_plugin(BadSignature())
    assert isinstance(caught.value.__cause__, pluggy.PluginValidationError)
    with pytest.raises(hwrng.InvalidArgumentError, match="'unknown' does not fit"):
        registry.register_plugin(UnknownHook(), name="unknown")
    assert registry.plugin_manager.get_plugins() == set()


def test_process_wide_functions() -> None:
    plugin = Plugin(make("inproc", priority=-5))
    name = hwrng.register_plugin(plugin)
    try:
        assert hwrng.get_platform("inproc").name == "inproc"
        assert any(r.name == "inproc" and r.distribution is None for r in hwrng.list_platforms())
        assert hwrng.get_platform().name == "cpu", "a negative priority never wins"
    finally:
        hwrng.unregister_plugin(name)
    assert all(r.name != "inproc" for r in hwrng.list_platforms())


def test_disable_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HWRNG_DISABLE_PLUGINS", "npu, cuda")
    registry = Registry()
    assert registry.names() == ["cpu"]
    assert registry.disabled_plugins == ["cuda", "npu"]


def test_a_probe_that_raises_never_breaks_auto_selection() -> None:
    class Exploding(Accelerator):
        name: ClassVar[str] = "boom"
        priority: ClassVar[int] = 1000

        def unavailable_reason(self) -> str | None:
            raise RuntimeError("probe exploded")

    registry = registry_with(Plugin(Exploding(), make("ok", 10)))
    assert registry.get_platform().name == "ok"


@pytest.mark.parametrize(
    ("attribute", "value", "message"),
    [
        ("priority", "high", "priority that is not an int"),
        ("priority", True, "priority that is not an int"),
        ("dist_backend", None, "no string 'dist_backend'"),
        ("name", "", "no usable 'name'"),
        ("name", "a:b", "no usable 'name'"),
        ("capabilities", ["dtensor"], "capabilities that are not a set"),
    ],
)
def test_malformed_platforms_are_broken_plugins(
    attribute: str, value: object, message: str
) -> None:
    bad = make("bad")
    setattr(bad, attribute, value)
    registry = registry_with(Plugin(bad), Plugin(make("ok", 10)))
    assert registry.get_platform().name == "ok"
    broken = registry.broken_plugins
    assert len(broken) == 1 and message in broken[0].error


def test_hook_must_return_a_sequence() -> None:
    class ReturnsOne:
        @hwrng.hookimpl
        def hwrng_platforms(self) -> object:
            return make("single")

    registry = registry_with(ReturnsOne())
    assert "must return a sequence of platforms" in registry.broken_plugins[0].error


def test_backend_variable_keeps_its_device_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HWRNG_BACKEND", "cpu:5")
    with pytest.raises(hwrng.InvalidDeviceError, match="index 5 is out of range"):
        Registry().get_platform()
    monkeypatch.setenv("HWRNG_BACKEND", "cpu:0")
    assert Registry().get_platform().name == "cpu"


def test_misspelt_disabled_plugins_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HWRNG_DISABLE_PLUGINS", "npu,cdua")
    registry = Registry()
    with pytest.warns(hwrng.HwrngWarning, match="'cdua', which no installed plugin is called"):
        registry.load()
    assert registry.disabled_plugins == ["npu"]


HOSTILE = {
    "exits": "import sys\nsys.exit(3)\n",
    "slow": "import time\ntime.sleep(30)\n",
    "exit_hook": (
        "import hwrng, sys\n@hwrng.hookimpl\ndef hwrng_platforms():\n    sys.exit('no')\n"
    ),
}


@pytest.fixture
def hostile_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from helpers import write_distribution

    for name, source in HOSTILE.items():
        write_distribution(tmp_path, f"{name}-hwrng", "1.0", f"{name}_hwrng", source, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("HWRNG_PLUGIN_IMPORT_TIMEOUT", "1")
    return tmp_path


def test_hostile_plugins_are_broken_plugins(hostile_site: Path) -> None:
    import importlib

    importlib.invalidate_caches()
    started = time.monotonic()
    registry = Registry()
    assert registry.get_platform("cpu").name == "cpu"
    assert time.monotonic() - started < 10, "a slow plugin's import is bounded"
    broken = {b.plugin: b for b in registry.broken_plugins}
    assert "sys.exit(3)" in broken["exits"].error and broken["exits"].stage == "import"
    assert "took longer than 1 s" in broken["slow"].error
    assert "SystemExit" in broken["exit_hook"].error and broken["exit_hook"].stage == "hook"
    assert registry.get_platform().name == "cpu"


def test_hostile_plugins_do_not_stop_the_command_line(hostile_site: Path) -> None:
    result = hwrng_backends(site=hostile_site)
    assert result.returncode == 0, result.stderr
    assert "selected: cpu" in result.stdout
    for name in HOSTILE:
        assert any(line.startswith(f"{name} ") for line in result.stdout.splitlines()), name


def test_backend_variable_error_is_one_line() -> None:
    result = hwrng_backends(env={"HWRNG_BACKEND": ":0"})
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert "selected: none (HWRNG_BACKEND=':0': empty backend name" in result.stdout


def test_a_probe_that_raises_is_reported_as_unavailable() -> None:
    from hwrng.backends.cpu import CPUPlatform

    class Exploding(CPUPlatform):
        name = "exploding"

        def unavailable_reason(self) -> str | None:
            raise RuntimeError("driver gone")

    class Plugin:
        @hwrng.hookimpl
        def hwrng_platforms(self) -> Sequence[hwrng.Platform]:
            return [Exploding()]

    registry = Registry(entry_point_group=None)
    registry.register_plugin(Plugin())
    with pytest.raises(hwrng.BackendUnavailableError, match="RuntimeError: driver gone"):
        registry.get_platform("exploding")


def test_no_warnings_from_a_plain_registry() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Registry().load()


COUNTED_PLUGIN = """
import hwrng
from hwrng.backends.cpu import CPUPlatform

LOADS = 0


class CountedPlatform(CPUPlatform):
    name = "counted"
    priority = -10


class _Plugin:
    @hwrng.hookimpl
    def hwrng_platforms(self):
        return [CountedPlatform()]


_PLUGIN = _Plugin()


def __getattr__(name):  # every load of the entry point 'counted_plugin:plugin' passes here
    global LOADS
    if name != "plugin":
        raise AttributeError(name)
    LOADS += 1
    return _PLUGIN
"""

COUNT_GROUP = "hwrng_count_test"


def test_each_plugin_is_loaded_once_and_its_metadata_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.metadata
    import sys
    from collections import Counter

    site = tmp_path / "site"
    site.mkdir()
    (site / "counted_plugin.py").write_text(COUNTED_PLUGIN)
    monkeypatch.syspath_prepend(str(site))
    info = tmp_path / "meta" / "hwrng_counted-1.0.dist-info"  # found only by the finder below
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hwrng-counted\nVersion: 1.0\nRequires-Dist: hwrng>=0.1\n"
    )
    (info / "entry_points.txt").write_text(f"[{COUNT_GROUP}]\ncounted = counted_plugin:plugin\n")
    reads: Counter[str] = Counter()

    class CountingDistribution(importlib.metadata.PathDistribution):
        def read_text(self, filename: str) -> str | None:
            reads[filename] += 1
            return super().read_text(filename)

    class CountingFinder(importlib.metadata.DistributionFinder):
        def find_spec(self, *args: object) -> None:
            return None

        def find_distributions(
            self, context: importlib.metadata.DistributionFinder.Context | None = None
        ) -> list[importlib.metadata.Distribution]:
            name = None if context is None else context.name
            if name is not None and name.replace("_", "-").lower() != "hwrng-counted":
                return []
            return [CountingDistribution(info)]

    finder = CountingFinder()
    sys.meta_path.append(finder)
    try:
        importlib.metadata.entry_points(group=COUNT_GROUP)  # what finding entry points reads
        baseline = Counter(reads)
        reads.clear()
        registry = Registry(entry_point_group=COUNT_GROUP)
        assert registry.get_platform("counted").name == "counted"
        rows = {row.name: row for row in registry.list_platforms()}
        assert registry.get_platform("counted").name == "counted"
        registry.list_platforms()
        loads = sys.modules["counted_plugin"].LOADS
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("counted_plugin", None)
    assert rows["counted"].available, rows["counted"]
    assert (rows["counted"].distribution, rows["counted"].version) == ("hwrng-counted", "1.0")
    assert loads == 1, "the isolated import's object is the one registered"
    assert reads["METADATA"] == baseline["METADATA"] + 1, reads
    assert reads["entry_points.txt"] == baseline["entry_points.txt"], reads
