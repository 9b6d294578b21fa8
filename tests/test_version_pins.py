"""A backend's requirement on hwrng is read as pip reads it, and the advice names what to change.

The expectations are written out by hand from PEP 440 and from what ``pip check``
accepts (an installed pre-release is judged by its version; a local label is
ignored by a specifier that names none), never computed with ``packaging``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import hwrng_backends

import hwrng
from hwrng._pins import pin_mismatch

# (Requires-Dist, installed hwrng, whether pip accepts it)
CASES = [
    ("hwrng==0.1.*", "0.1.0", True),
    ("hwrng==0.1.*", "0.1.7", True),
    ("hwrng==0.1.*", "0.2.0", False),
    ("hwrng~=0.1.0", "0.1.0", True),
    ("hwrng~=0.1.0", "0.1.3", True),
    ("hwrng~=0.1.0", "0.2.0", False),
    ("hwrng>=0.1,<0.2", "0.1.0", True),
    ("hwrng>=0.1,<0.2", "0.2.0", False),
    ("hwrng==0.1", "0.1.0", True),  # PEP 440 pads the release with zeros
    ("hwrng==0.1", "0.1.1", False),
    ("hwrng==0.1.0", "0.1.0", True),
    ("hwrng==0.0.9", "0.1.0", False),
    ("hwrng (==0.1.0)", "0.1.0", True),  # the old parenthesised form
    ("HWRNG==0.1.0", "0.1.0", True),  # names compare normalised
    ("hwrng==0.1.0", "0.1.0+cu12", True),  # a local label is ignored ...
    ("hwrng==0.1.0+cu12", "0.1.0", False),  # ... unless the specifier names one
    ("hwrng>=0.1", "0.2.0rc1", True),  # pip check accepts an installed pre-release
    ("hwrng>=0.2", "0.2.0rc1", False),  # that is older than the release it precedes
    ("hwrng==0.0.9; extra == 'old'", "0.1.0", True),  # only with an extra nobody asked for
    ("hwrng==0.0.9; python_version < '3'", "0.1.0", True),  # a marker that does not hold
    ("hwrng-cuda==0.0.9", "0.1.0", True),  # another distribution
    ("numpy>=1.26", "0.1.0", True),
]


@pytest.mark.parametrize(("requirement", "installed", "accepted"), CASES)
def test_a_pin_is_read_as_pip_reads_it(requirement: str, installed: str, accepted: bool) -> None:
    reason = pin_mismatch("hwrng-acme", "2.0", ["numpy>=1.26", requirement], installed)
    assert (reason is None) == accepted, reason


def test_the_advice_names_what_to_change() -> None:
    reason = pin_mismatch("hwrng-acme", "2.0", ["hwrng>=0.3,<0.4"], "0.1.0")
    assert reason == (
        "hwrng-acme 2.0 requires hwrng<0.4,>=0.3, but hwrng 0.1.0 is installed: install the "
        'hwrng it requires (pip install "hwrng<0.4,>=0.3") or a release of hwrng-acme that '
        "accepts hwrng 0.1.0"
    )


def test_a_malformed_pin_on_hwrng_is_reported_and_one_on_anything_else_is_not() -> None:
    bad = pin_mismatch("hwrng-acme", "2.0", ["hwrng ==0.1.0 oops"], "0.1.0")
    assert bad is not None and "is not a valid requirement" in bad and "\n" not in bad
    assert pin_mismatch("hwrng-acme", "2.0", ["numpy ==1 oops"], "0.1.0") is None


def _release_specifiers(version: str) -> dict[str, str]:
    """The four ways of pinning the installed hwrng's minor release that the issue names."""
    major, minor, *rest = version.split("+", maxsplit=1)[0].split(".")
    micro = rest[0] if rest else "0"
    exact = f"{major}.{minor}" if micro == "0" else f"{major}.{minor}.{micro}"
    return {
        "star": f"=={major}.{minor}.*",
        "tilde": f"~={major}.{minor}.0",
        "range": f">={major}.{minor},<{major}.{int(minor) + 1}",
        "short": f"=={exact}",
        "old": "==0.0.9",
    }


BACKEND = """
import hwrng
from hwrng.backends.cpu import CPUPlatform


class PinnedPlatform(CPUPlatform):
    name = "{name}"
    priority = -10


@hwrng.hookimpl
def hwrng_platforms():
    return [PinnedPlatform()]
"""


def test_backends_pinned_as_pip_allows_are_used(tmp_path: Path) -> None:
    specifiers = _release_specifiers(hwrng.__version__)
    for kind, specifier in specifiers.items():
        name = f"pin{kind}"
        (tmp_path / f"{name}_backend.py").write_text(BACKEND.format(name=name))
        info = tmp_path / f"hwrng_{name}-3.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: hwrng-{name}\nVersion: 3.0\n"
            f"Requires-Dist: hwrng{specifier}\n"
        )
        (info / "entry_points.txt").write_text(f"[hwrng]\n{name} = {name}_backend\n")
    result = hwrng_backends(tmp_path)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    for kind in ("star", "tilde", "range", "short"):
        assert rows[f"pin{kind}"].split()[1] == "yes", rows[f"pin{kind}"]
    old = rows["pinold"]
    assert old.split()[1] == "unavailable"
    assert 'pip install "hwrng==0.0.9"' in old
    assert f'pip install "hwrng-pinold=={hwrng.__version__}"' not in old
