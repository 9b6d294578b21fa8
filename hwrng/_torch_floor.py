"""The oldest torch hwrng runs on, checked by ``import hwrng`` before any module touches torch.

hwrng reaches into parts of torch that differ between releases, and refuses by
feature what a supported torch lacks (docs/architecture.md). Below the floor
whole modules are missing, so hwrng would stop wherever it first reached for
one -- on torch 2.9, ``No module named 'torch._library.effects'``, raised by
``import hwrng`` while it imported the DTensor adapter eagerly, and by the
first DTensor op or ``hwrng.verify`` since -- without saying why.
:func:`require_supported_torch` runs first and names the floor, the installed
torch and the fix instead (``TorchVersionError``, an ``ImportError``).

The floor is ``pyproject.toml``'s ``torch>=`` requirement; pip enforces it on
an ordinary install, but not where hwrng was installed with ``--no-deps`` or
runs from a checkout.
"""

from __future__ import annotations

import re
import sys

import torch

from hwrng._exceptions import TorchVersionError

__all__ = ["TORCH_FLOOR", "below_floor", "require_supported_torch"]

#: The oldest torch hwrng supports, as pyproject.toml requires it (``torch>=2.10``).
TORCH_FLOOR = (2, 10)


def below_floor(version: str) -> bool:
    """Whether torch ``version`` (``torch.__version__``) is older than :data:`TORCH_FLOOR`.

    Only the major and minor release count: a local build (``2.10.0+cu130``) or
    a pre-release of the floor (``2.10.0a0+git...``) is not below it. A string
    that does not start with ``MAJOR.MINOR`` cannot be judged and is not
    refused: the checks by feature still name what such a torch lacks.

    Parameters
    ----------
    version : str
        A torch version string.

    Returns
    -------
    bool
        True when the release is older than the floor.

    Examples
    --------
    >>> below_floor("2.9.1+cu128"), below_floor("2.10.0a0+git1234"), below_floor("2.13.0+cpu")
    (True, False, False)
    """
    found = re.match(r"\s*(\d+)\.(\d+)", version)
    if found is None:
        return False
    return (int(found.group(1)), int(found.group(2))) < TORCH_FLOOR


def require_supported_torch(version: str | None = None) -> None:
    """Refuse a torch older than :data:`TORCH_FLOOR`, naming it, the floor and the fix.

    Parameters
    ----------
    version : str, optional
        The version to judge (default: the installed ``torch.__version__``).

    Raises
    ------
    TorchVersionError
        When the version is below the floor.
    """
    installed = torch.__version__ if version is None else version
    if not below_floor(installed):
        return
    floor = ".".join(map(str, TORCH_FLOOR))
    raise TorchVersionError(
        f"hwrng needs torch >= {floor}; this interpreter ({sys.executable}) has torch "
        f"{installed}, which lacks parts of torch hwrng uses. Install torch {floor} or newer, "
        f"the build for your hardware (pip install --upgrade 'torch>={floor}'; without a GPU, "
        "pip install torch==2.13.0 takes the CPU wheel); a --no-deps install of hwrng does "
        "not check this for you"
    )


# Checked when imported: hwrng/__init__.py imports this module before any other.
require_supported_torch()
