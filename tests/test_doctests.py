"""The examples in hwrng's docstrings run and say what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "hwrng.fork",
    "hwrng.seeding",
    "hwrng.sharding",
    "hwrng.states",
    "hwrng.tracker",
    "hwrng.workers",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert attempted > 0, f"{name} has no examples"
    assert failed == 0
