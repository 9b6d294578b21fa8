"""The rule table ``hwrng conformance`` prints."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["rule_table"]


def rule_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart, a rule of dashes under the headers.

    Examples
    --------
    >>> print(rule_table(["RULE", "RESULT"], [["fork", "pass"]]))
    RULE  RESULT
    ----  ------
    fork  pass
    """
    columns = list(zip(headers, *rows, strict=True))
    widths = [max(map(len, column)) for column in columns]
    template = "  ".join(f"{{:<{width}}}" for width in widths)
    body = [template.format(*row).rstrip() for row in (headers, *rows)]
    return "\n".join([body[0], "  ".join("-" * width for width in widths), *body[1:]])
