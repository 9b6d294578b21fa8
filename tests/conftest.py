"""Shared fixtures of hwrng's own tests."""

from __future__ import annotations

import gc
import os
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

import hwrng
from hwrng._host import HOST_COUNTER
from hwrng._seeding import current_seeding, record_seeding, seeded_mesh
from hwrng._states import _live as _live_trackers


@pytest.fixture
def cpu() -> hwrng.Platform:
    """The built-in CPU platform."""
    return hwrng.get_platform("cpu")


def _dtensor_tracker() -> Any:
    from torch.distributed.tensor import _random

    return _random._rng_tracker


@pytest.fixture(autouse=True)
def _restore_every_global() -> Iterator[None]:
    """Put back every global RNG a test can change, so that tests never couple.

    torch's CPU generator (and what hwrng's counter remembers of it), Python's
    ``random``, NumPy's global generator, ``PYTHONHASHSEED``, the seed plan in
    force, and torch's DTensor tracker (a test that installs hwrng's adapter and
    fails before uninstalling must not leave it in place). A tracker a test
    dropped inside a reference cycle (a kept traceback) is collected before the
    next test, or that test's save would hold a tracker its load no longer finds.
    """
    host = torch.default_generator
    saved = (
        host.get_state(),
        HOST_COUNTER.export(host),
        random.getstate(),
        np.random.get_state(),
        os.environ.get("PYTHONHASHSEED"),
        current_seeding(),
        _dtensor_tracker(),
        seeded_mesh(),
    )
    trackers_before = len(_live_trackers)
    yield
    if len(_live_trackers) > trackers_before:
        gc.collect()
    hwrng.dtensor.uninstall()
    from torch.distributed.tensor import _random

    _random._rng_tracker = saved[6]
    host.set_state(saved[0])
    HOST_COUNTER.restore(host, saved[1])
    random.setstate(saved[2])
    np.random.set_state(saved[3])
    if saved[4] is None:
        os.environ.pop("PYTHONHASHSEED", None)
    else:
        os.environ["PYTHONHASHSEED"] = saved[4]
    record_seeding(saved[5], saved[7])


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Any, parent: Any) -> Any:
    """No doctests from the tests' own files: ``--doctest-modules`` is for hwrng's examples."""
    from _pytest.doctest import DoctestModule

    collected = yield
    return [node for node in collected if not isinstance(node, DoctestModule)]
