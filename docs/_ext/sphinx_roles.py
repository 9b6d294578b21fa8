"""A Griffe extension: the reStructuredText of hwrng's docstrings, in Markdown.

hwrng's docstrings name objects with Sphinx roles (``:class:`~hwrng.Platform```)
and introduce literal blocks with ``::``, which Markdown would show as written.
mkdocstrings loads this file (``mkdocs.yml``, ``extensions``) and rewrites each
role, before rendering, as the code span Sphinx would display (``~`` keeps the
last component, an explicit title is kept as is), and ``word::`` before an
indented block as ``word:`` (the indented block is a code block in Markdown too).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const):`([^`]+)`")
LITERAL = re.compile(r"(\S)?\s*::\n(?=\n)")


def _display(target: str) -> str:
    """What Sphinx shows for a role's target: ``Title <a.b>``, ``~a.b.C`` or ``a.b.C``."""
    titled = re.fullmatch(r"(.+?)\s*<[^>]+>", target)
    if titled:
        return titled.group(1)
    if target.startswith("~"):
        return target[1:].rsplit(".", 1)[-1]
    return target.lstrip("!")


def rewrite(text: str) -> str:
    """``text`` with every Sphinx role a code span and every ``::`` a colon."""
    text = ROLE.sub(lambda match: f"`{_display(match.group(1))}`", text)
    return LITERAL.sub(lambda match: f"{match.group(1)}:\n" if match.group(1) else "\n", text)


class SphinxRoles(griffe.Extension):
    """Rewrite the roles of every docstring once the object tree is complete."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s own docstring (aliases share their target's)."""
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Rewrite a top-level package's docstring (``on_object`` sees only its members)."""
        self.on_object(obj=pkg)
