"""Plain-text tables, shared by the ``hwrng`` command line and the commands plugins add."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["format_table"]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Lay ``rows`` out under ``headers`` in left-aligned columns.

    Examples
    --------
    >>> print(format_table(["a", "bb"], [[1, "x"], ["long", ""]]))
    a     bb
    ----  --
    1     x
    long
    """
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
