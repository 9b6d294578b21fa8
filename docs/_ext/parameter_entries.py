"""A Griffe extension: one docstring entry per parameter, so each shows its own default.

numpydoc lets one entry describe several parameters (``low, high`` or
``on_mismatch, platform : str``), and hwrng's docstrings use that. Griffe's
NumPy parser splits such an entry into one row per name but gives every row
the default *and* the type of the first name that has them in the signature:
``uniform_``'s ``high`` was shown as ``0.0`` (``low``'s default), and
``HwrngCallback``'s ``platform`` as ``OnMismatch = 'error'`` (``on_mismatch``'s).
mkdocstrings loads this file (``mkdocs.yml``, ``extensions``) and, before the
docstring is parsed, writes such an entry of a ``Parameters`` or ``Other
Parameters`` section as one entry per name, each with the shared type (if one
is written) and description; Griffe then looks up each name's own default and
annotation. The rendered rows are otherwise the same.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: The sections whose entries are parameters (NumPy titles, compared lower-cased).
SECTIONS = frozenset({"parameters", "other parameters"})
#: An entry naming several parameters: ``a, b`` or ``a, *b : type`` (Griffe's own grammar).
SHARED = re.compile(
    r"(?P<names>\*{0,2}[_a-z]\w*(?:, \*{0,2}[_a-z]\w*)+)(?P<type> : .*)?", re.IGNORECASE
)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_title(lines: list[str], index: int) -> bool:
    """Whether ``lines[index]`` is a section title (a non-empty line over a dash line)."""
    following = lines[index + 1] if index + 1 < len(lines) else ""
    return bool(lines[index].strip()) and bool(re.fullmatch(r"\s*-+\s*", following))


def split_entries(text: str) -> str:
    """``text`` with every several-names entry of its parameter sections split by name."""
    lines = text.split("\n")
    out: list[str] = []
    index = 0
    in_parameters = False
    item_indent: int | None = None
    while index < len(lines):
        line = lines[index]
        if _is_title(lines, index):
            in_parameters = line.strip().lower() in SECTIONS
            item_indent = None
            out += lines[index : index + 2]
            index += 2
            continue
        if in_parameters and line.strip() and item_indent is None:
            item_indent = _indent(line)
        match = SHARED.fullmatch(line.strip()) if in_parameters else None
        if match is None or _indent(line) != item_indent:
            out.append(line)
            index += 1
            continue
        end = index + 1
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > _indent(line)):
            end += 1
        body_end = end  # the blank lines after the description stay once, after the last copy
        while body_end > index + 1 and not lines[body_end - 1].strip():
            body_end -= 1
        prefix = " " * _indent(line)
        for name in match.group("names").split(", "):
            out += [f"{prefix}{name}{match.group('type') or ''}", *lines[index + 1 : body_end]]
        out += lines[body_end:end]
        index = end
    return "\n".join(out)


class OneEntryPerParameter(griffe.Extension):
    """Split every several-names parameter entry of every docstring."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s own docstring (aliases share their target's)."""
        if obj.docstring is not None:
            obj.docstring.value = split_entries(obj.docstring.value)
