"""A plugin distribution's requirement on hwrng, read as pip reads it.

A backend built for another hwrng is reported by ``hwrng backends`` and not
used. Whether it was built for this one is what pip would say: each
``Requires-Dist`` on ``hwrng`` is parsed with :mod:`packaging` (PEP 508) and
the installed version checked against its specifier as ``pip check`` does
(pip's ``_internal/operations/check.py``: ``specifier.contains(version,
prereleases=True)``, markers evaluated with ``extra=""``): ``==0.1.*``,
``~=0.1.0``, ``>=0.1,<0.2`` and ``==0.1`` all accept 0.1.0; an installed
pre-release (``0.2.0rc1``) is judged by its version like any other, and a
local version (``0.1.0+cu12``) satisfies ``==0.1.0`` (PEP 440 ignores the
local label unless the specifier names one). A requirement behind a marker
that does not hold here (``extra == "docs"``, another Python) does not apply,
as pip installs it only when asked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["PROJECT", "pin_mismatch"]

#: The distribution whose version plugins pin.
PROJECT = "hwrng"

# A PEP 508 requirement starts with the distribution's name.
_NAME = re.compile(r"\s*[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


def pin_mismatch(
    distribution: str, version: str, requires: Iterable[str], installed: str
) -> str | None:
    """Say why ``distribution`` cannot serve hwrng ``installed``, or return ``None``.

    Parameters
    ----------
    distribution, version
        The plugin's distribution and its version (for the message).
    requires
        Its ``Requires-Dist`` lines, as its metadata holds them.
    installed
        The installed hwrng's version.

    Returns
    -------
    str or None
        One sentence naming the requirement, the installed hwrng, and what to
        change: the hwrng the plugin asks for, or a release of the plugin
        that accepts this hwrng.
    """
    # packaging's parsers cost more to import than the rest of _registry: loaded when a
    # plugin is first checked, not by import hwrng
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    here = Version(installed)
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement as error:
            named = _NAME.match(text)
            if named is None or canonicalize_name(named.group()) != PROJECT:
                continue  # a requirement on something else, which pip itself would have refused
            reason = str(error).splitlines()[0]
            return (
                f"{distribution} {version} requires {text!r}, which is not a valid "
                f"requirement ({reason}): reinstall a release of {distribution} with valid "
                "metadata"
            )
        if canonicalize_name(requirement.name) != PROJECT:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if requirement.specifier.contains(here, prereleases=True):
            continue
        wanted = f"{PROJECT}{requirement.specifier}"
        return (
            f"{distribution} {version} requires {wanted}, but {PROJECT} {installed} is "
            f'installed: install the {PROJECT} it requires (pip install "{wanted}") or a '
            f"release of {distribution} that accepts {PROJECT} {installed}"
        )
    return None
