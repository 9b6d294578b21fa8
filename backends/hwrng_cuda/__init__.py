"""hwrng's CUDA backend: ``torch.cuda`` generators, with ``nccl`` for collectives.

CUDA generators are Philox with a native ``(seed, offset)`` counter, read and
set on the host through ``Generator.get_offset``/``set_offset``: hwrng's
tracked regions never copy RNG state through device memory and never wait on
the device.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import ModuleType
from typing import ClassVar

import torch

import hwrng

__all__ = ["CUBLAS_WORKSPACE_CONFIG", "CUDAPlatform", "hwrng_platforms"]

#: The cuBLAS workspace setting torch's reproducibility notes require for
#: deterministic cuBLAS (":16:8" is the other accepted value).
CUBLAS_WORKSPACE_CONFIG = ":4096:8"


class CUDAPlatform(hwrng.DeviceModulePlatform):
    """NVIDIA (or ROCm) GPUs through ``torch.cuda``."""

    name: ClassVar[str] = "cuda"
    dist_backend: ClassVar[str] = "nccl"

    def not_available_detail(self, module: ModuleType) -> str:
        """Tell a CPU-only torch build apart from a machine with no visible GPU."""
        if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
            return f"this torch build ({torch.__version__}) has no CUDA support"
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hint = f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
        return f"no CUDA device is visible (torch.cuda.is_available() is False{hint})"

    def enable_determinism(self) -> dict[str, str]:
        """Make cuDNN and cuBLAS deterministic.

        Sets ``torch.backends.cudnn.deterministic = True``,
        ``torch.backends.cudnn.benchmark = False`` and, unless already set,
        ``CUBLAS_WORKSPACE_CONFIG=:4096:8``. cuBLAS reads that variable when it
        creates its handle, so call this before the first matrix product.
        """
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        changed = {
            "torch.backends.cudnn.deterministic": "True",
            "torch.backends.cudnn.benchmark": "False",
        }
        if "CUBLAS_WORKSPACE_CONFIG" not in os.environ:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_CONFIG
            changed["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_CONFIG
        return changed


@hwrng.hookimpl
def hwrng_platforms() -> Sequence[hwrng.Platform]:
    """Provide the CUDA platform."""
    return [CUDAPlatform()]
