"""The examples in hwrng's docstrings run and say what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "hwrng._cli._table",
    "hwrng._fork",
    "hwrng._mesh",
    "hwrng._plan",
    "hwrng._sharding",
    "hwrng._states",
    "hwrng._tracker",
    "hwrng._workers",
    "hwrng.invariant",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert attempted > 0, f"{name} has no examples"
    assert failed == 0
