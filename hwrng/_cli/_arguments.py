"""Argument types the built-in commands share (each a one-line error for argparse)."""

from __future__ import annotations

import argparse

__all__ = ["non_negative", "parse_dims", "parse_mesh", "positive"]


def parse_mesh(text: str) -> dict[str, int]:
    """``dp=2,pp=2,tp=2`` -> ``{"dp": 2, "pp": 2, "tp": 2}``."""
    mesh: dict[str, int] = {}
    for part in text.split(","):
        name, sep, size = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"expected NAME=SIZE, got {part!r}")
        if name in mesh:
            raise argparse.ArgumentTypeError(f"mesh dim {name!r} given twice")
        try:
            mesh[name] = int(size)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"size of {name!r} is not an integer: {size!r}"
            ) from None
    return mesh


def parse_dims(text: str) -> list[str]:
    """``pp,tp`` -> ``["pp", "tp"]``."""
    return [d.strip() for d in text.split(",") if d.strip()]


def non_negative(text: str) -> int:
    """An integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive(text: str) -> int:
    """An integer >= 1."""
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value
