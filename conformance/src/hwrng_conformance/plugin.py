"""The pytest plugin behind hwrng's conformance suite.

Load it with ``-p hwrng_conformance.plugin`` (it is deliberately not an
automatic ``pytest11`` plugin, so it never touches unrelated pytest runs)::

    pytest -p hwrng_conformance.plugin --pyargs hwrng_conformance.suite --hwrng-backend acme

or simply ``hwrng conformance --backend acme``.

Options
-------
``--hwrng-backend NAME``
    A backend to check; repeatable. Default: every available backend.
``--hwrng-nproc N``
    Processes for the multi-process rules (default 4; fewer than 2 skips them).
``--hwrng-profile no-float64``
    Check the backend as one without float64 (see :mod:`hwrng_conformance.profiles`),
    whether or not its device has it.

Fixtures
--------
``platform``
    The :class:`hwrng.Platform` under test; suite tests run once per backend.
``dist_pool``
    A :class:`~hwrng.testing.DistributedPool` of ``--hwrng-nproc``
    ranks for the platform, started once per backend and shared by the rules.
``profile``
    The backend's :class:`~hwrng_conformance.profiles.Profile` (float64,
    offsets), found once per backend; rules that depend on it record it, and
    the verdict reports it.

Marker
------
``@pytest.mark.hwrng_requires("capability", ...)`` skips a rule, saying why,
on a platform without the named :attr:`~hwrng.Platform.capabilities`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import hwrng
from hwrng.testing import DistributedPool
from hwrng_conformance._exceptions import BackendOptionError
from hwrng_conformance.profiles import PROFILE_OPTIONS, Profile, detect_profile

__all__ = [
    "DEFAULT_NPROC",
    "backends_to_check",
    "dist_pool",
    "platform",
    "profile",
    "pytest_addoption",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_runtest_setup",
    "selected_backends",
]

DEFAULT_NPROC = 4
_BACKENDS_KEY: pytest.StashKey[list[str]] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--hwrng-backend`` and ``--hwrng-nproc``."""
    group = parser.getgroup("hwrng", "hwrng conformance suite")
    group.addoption(
        "--hwrng-backend",
        action="append",
        default=[],
        metavar="NAME",
        help="hwrng backend to check (repeatable; default: every available backend)",
    )
    group.addoption(
        "--hwrng-nproc",
        type=int,
        default=DEFAULT_NPROC,
        metavar="N",
        help=f"processes for the multi-process rules (default {DEFAULT_NPROC})",
    )
    group.addoption(
        "--hwrng-profile",
        action="append",
        default=[],
        choices=PROFILE_OPTIONS,
        help="check the backend under this capability profile (repeatable): "
        "no-float64 runs every rule with float64 refused",
    )


def backends_to_check(names: Sequence[str], option: str) -> list[str]:
    """Return the backends a run checks: ``names``, each once, or every available one.

    The one check of the backends asked for, which ``hwrng conformance`` and
    the pytest plugin both make.

    Parameters
    ----------
    names
        The backends named on the command line, in order; empty for every
        backend available here (then the answer may be empty too).
    option
        The option that named them, for the message (``--backend``).

    Raises
    ------
    BackendOptionError
        For a name hwrng cannot use here (unknown, unavailable, provided twice).
    """
    chosen = list(dict.fromkeys(names))
    for name in chosen:
        try:
            hwrng.get_platform(name)
        except hwrng.BackendError as error:
            raise BackendOptionError(f"{option} {name}: {error}") from None
    return chosen or [row.name for row in hwrng.list_platforms() if row.available]


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker and resolve which backends to check."""
    config.addinivalue_line(
        "markers",
        "hwrng_requires(*capabilities): skip on platforms without these capabilities",
    )
    try:
        names = backends_to_check(config.getoption("--hwrng-backend"), "--hwrng-backend")
    except BackendOptionError as error:
        raise pytest.UsageError(str(error)) from None
    if not names:
        raise pytest.UsageError("no available hwrng backend to check (see: hwrng backends)")
    config.stash[_BACKENDS_KEY] = names


def selected_backends(config: pytest.Config) -> list[str]:
    """Return the backend names this run checks."""
    selected: list[str] = config.stash[_BACKENDS_KEY]
    return list(selected)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that uses ``platform`` once per selected backend."""
    if "platform_name" in metafunc.fixturenames:
        names = selected_backends(metafunc.config)
        metafunc.parametrize("platform_name", names, ids=names, scope="session")


@pytest.fixture(scope="session")
def platform(platform_name: str) -> hwrng.Platform:
    """The platform under test."""
    return hwrng.get_platform(platform_name)


@pytest.fixture(scope="session")
def dist_pool(platform: hwrng.Platform, pytestconfig: pytest.Config) -> Iterator[DistributedPool]:
    """A pool of ``--hwrng-nproc`` ranks on ``platform``, started once per backend.

    The ranks use the backend :func:`hwrng.collective_backend` chooses: the
    platform's dist backend when it can serve them (every rank with a device
    of its own, where the platform needs one), and gloo otherwise (e.g. one
    GPU for four processes).
    """
    nproc = int(pytestconfig.getoption("--hwrng-nproc"))
    if nproc < 2:
        pytest.skip(f"multi-process rules need --hwrng-nproc >= 2 (got {nproc})")
    backend = hwrng.collective_backend(platform, nproc)
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")

    def progress(text: str) -> None:  # ranks take seconds to start: say so as it happens
        if reporter is None:
            return
        suspended = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
        with suspended:
            reporter.write_line(f"hwrng conformance: {platform.name}: {text}")

    with DistributedPool(
        nproc, backend=backend, platform=platform.name, timeout=180, progress=progress
    ) as pool:
        yield pool


@pytest.fixture(scope="session")
def profile(platform: hwrng.Platform, pytestconfig: pytest.Config) -> Profile:
    """The backend's capability profile: what its device and generators have."""
    return detect_profile(platform, set(pytestconfig.getoption("--hwrng-profile")))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip rules whose ``hwrng_requires`` capabilities the platform lacks."""
    marker = item.get_closest_marker("hwrng_requires")
    if marker is None:
        return
    callspec: Any = getattr(item, "callspec", None)
    name = callspec.params.get("platform_name") if callspec is not None else None
    if name is None:
        return
    missing = [c for c in marker.args if c not in hwrng.get_platform(name).capabilities]
    if missing:
        pytest.skip(f"the {name} platform lacks capability {', '.join(map(repr, missing))}")
