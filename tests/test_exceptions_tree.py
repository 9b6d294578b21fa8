"""The exceptions module's docstring draws the tree of hwrng's errors as it is."""

from __future__ import annotations

import inspect
import re

import hwrng
from hwrng import _exceptions

LINE = re.compile(r"^(?P<branch>[ │├└─]*)(?P<name>[A-Z]\w+)\s*(?:\((?P<builtin>\w+)\))?")


def _drawn() -> dict[str, tuple[str | None, str | None]]:
    """Each class the docstring draws: (its parent in the drawing, the built-in it names)."""
    doc = inspect.getdoc(_exceptions) or ""
    lines = doc.split("::", 1)[1].split("\n\n", 2)[1].splitlines()
    drawn: dict[str, tuple[str | None, str | None]] = {}
    parents: list[tuple[int, str]] = []  # (depth, name) of the open branches
    for line in lines:
        match = LINE.match(line.strip("\n"))
        assert match, line
        depth = len(match["branch"])
        while parents and parents[-1][0] >= depth:
            parents.pop()
        drawn[match["name"]] = (parents[-1][1] if parents else None, match["builtin"])
        parents.append((depth, match["name"]))
    return drawn


def test_the_tree_draws_every_error_under_its_parent() -> None:
    errors = {
        name: value
        for name, value in vars(_exceptions).items()
        if inspect.isclass(value) and issubclass(value, hwrng.HwrngError)
    }
    drawn = _drawn()
    assert set(drawn) == set(errors)
    for name, (parent, builtin) in drawn.items():
        cls = errors[name]
        hwrng_bases = [b.__name__ for b in cls.__bases__ if issubclass(b, hwrng.HwrngError)]
        other_bases = [b.__name__ for b in cls.__bases__ if not issubclass(b, hwrng.HwrngError)]
        assert hwrng_bases == ([parent] if parent else []), name
        if name != "HwrngError":
            assert other_bases == ([builtin] if builtin else []), name
