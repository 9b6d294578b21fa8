"""Shared fixtures of hwrng's own tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import hwrng


@pytest.fixture
def cpu() -> hwrng.Platform:
    """The built-in CPU platform."""
    return hwrng.get_platform("cpu")


@pytest.fixture(autouse=True)
def _keep_cpu_rng() -> Iterator[None]:
    """Put torch's CPU generator back after each test, so tests do not couple."""
    state = torch.default_generator.get_state()
    yield
    torch.default_generator.set_state(state)
