"""Real entry-point discovery: distributions written to a folder put on sys.path."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from helpers import hwrng_backends, write_distribution

import hwrng
from hwrng._registry import Registry

GOOD_PLUGIN = """
from typing import ClassVar

import hwrng
from hwrng.backends.cpu import CPUPlatform


class AcmePlatform(CPUPlatform):
    name: ClassVar[str] = "acme"
    priority: ClassVar[int] = -1

    def unavailable_reason(self):
        return "no Acme card in this machine"


@hwrng.hookimpl
def hwrng_platforms():
    return [AcmePlatform()]
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write_distribution(tmp_path, "acme-hwrng", "1.2.3", "acme_hwrng", GOOD_PLUGIN, "acme")
    write_distribution(
        tmp_path,
        "broken-hwrng",
        "0.0.1",
        "broken_hwrng",
        "raise ImportError('libacme.so: cannot open shared object file')\n",
        "broken",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return tmp_path


def test_entry_points_are_discovered(site: Path) -> None:
    registry = Registry()
    assert "acme" in registry.names()
    rows = {row.name: row for row in registry.list_platforms()}
    acme = rows["acme"]
    assert (acme.distribution, acme.version, acme.plugin) == ("acme-hwrng", "1.2.3", "acme")
    assert acme.status == "unavailable" and acme.reason == "no Acme card in this machine"
    broken = rows["broken"]
    assert broken.broken and broken.distribution == "broken-hwrng"
    assert "import failed: ImportError: libacme.so" in str(broken.reason)
    assert registry.get_platform().name == "cpu", "a broken plugin stops nothing"
    with pytest.raises(hwrng.BackendUnavailableError, match="no Acme card"):
        registry.get_platform("acme")


def test_cli_lists_discovered_and_broken_plugins(site: Path) -> None:
    result = hwrng_backends(site=site)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    acme = next(line for line in lines if line.startswith("acme "))
    assert "acme-hwrng 1.2.3 [acme]" in acme and "no Acme card in this machine" in acme
    broken = next(line for line in lines if line.startswith("broken "))
    assert "broken" in broken and "libacme.so" in broken
    assert "selected: cpu" in result.stdout
