"""A device platform's extension is looked for once per platform object.

Every op on the default generator asks the registry which platform is in force, and the
registry asks each platform whether it can serve. For a platform whose extension is
missing (``torch_npu`` on every machine but an Ascend host) or fails to import, asking
again searched ``sys.path`` (or ran the failing import) on every op -- more than a small
op itself cost. The answer is kept by the platform object; a new one (a new process)
looks again.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

import hwrng

EXTENSION = "hwrng_test_probe_extension"


class ProbePlatform(hwrng.DeviceModulePlatform):
    """A device whose torch device module would come from :data:`EXTENSION`."""

    name: ClassVar[str] = "hwrngprobe"
    dist_backend: ClassVar[str] = "gloo"
    extension_module: ClassVar[str | None] = EXTENSION
    install_hint: ClassVar[str] = "pip install hwrng-test-probe"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    sys.modules.pop(EXTENSION, None)


def test_a_missing_extension_is_looked_for_once_per_platform(site: Path) -> None:
    platform = ProbePlatform()
    missing = f"{EXTENSION} is not installed; pip install hwrng-test-probe"
    assert platform.unavailable_reason() == missing

    (site / f"{EXTENSION}.py").write_text("")
    importlib.invalidate_caches()
    assert platform.unavailable_reason() == missing, "the same object does not look again"
    with pytest.raises(hwrng.BackendUnavailableError, match="is not installed"):
        platform.load_device_module()

    found = ProbePlatform().unavailable_reason()
    assert found is not None and found.startswith("torch has no device module for 'hwrngprobe'")
    assert EXTENSION in sys.modules, "a new object found the extension and imported it"


def test_an_extension_that_fails_to_import_is_imported_once_per_platform(site: Path) -> None:
    runs = site / "runs.txt"
    (site / f"{EXTENSION}.py").write_text(
        f"with open({str(runs)!r}, 'a') as f:\n"
        "    f.write('x')\n"
        "raise OSError('libprobe.so: cannot open shared object file')\n"
    )
    platform = ProbePlatform()
    broken = f"importing {EXTENSION} failed: OSError: libprobe.so: cannot open shared object file"
    for _ in range(3):
        assert platform.unavailable_reason() == broken
    with pytest.raises(hwrng.BackendUnavailableError, match=r"libprobe\.so"):
        platform.load_device_module()
    assert runs.read_text() == "x", "the failing import ran once"

    assert ProbePlatform().unavailable_reason() == broken
    assert runs.read_text() == "xx", "a new object tries the import again"
