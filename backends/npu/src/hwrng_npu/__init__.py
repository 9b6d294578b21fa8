"""hwrng's Ascend NPU backend: ``torch_npu`` generators, with ``hccl`` for collectives.

``torch_npu`` is imported only when the npu platform is asked whether it is
available, and never on a host with a CUDA device: torch_npu refuses to load
beside CUDA in one process. Installing torch-npu where Ascend CANN is missing
breaks ``import torch`` itself (torch auto-loads installed device backends),
so this distribution (``hwrng-npu``, ``pip install "hwrng[npu]"``) does not
require it: on an Ascend host with CANN, ``pip install "hwrng-npu[torch-npu]"``
(torch-npu pins torch's version).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import ClassVar

import torch

import hwrng

__all__ = ["NPUPlatform", "hwrng_platforms"]


class NPUPlatform(hwrng.DeviceModulePlatform):
    """Huawei Ascend NPUs through ``torch_npu`` (``torch.npu``)."""

    name: ClassVar[str] = "npu"
    dist_backend: ClassVar[str] = "hccl"
    extension_module: ClassVar[str | None] = "torch_npu"
    install_hint: ClassVar[str] = "on an Ascend host with CANN: pip install 'hwrng-npu[torch-npu]'"

    def import_blocker(self) -> str | None:
        """Refuse to import torch_npu into a process that has a CUDA device."""
        if "torch_npu" in sys.modules:
            return None
        if torch.cuda.is_available():
            return (
                "torch_npu is installed but refuses to load beside a CUDA device in one "
                "process; hwrng does not import it here"
            )
        return None

    def state_digest(self, state: torch.Tensor) -> bytes:
        """The whole ``(seed, offset)`` Philox state: every byte of it changes the draws.

        torch_npu keeps CUDA's 16-byte layout, its seed keying Philox with all 64
        bits (:func:`hwrng.whole_state_digest`).
        """
        return hwrng.whole_state_digest(state)

    def enable_determinism(self) -> dict[str, str]:
        """Make HCCL collectives deterministic (``HCCL_DETERMINISTIC=true``).

        ``torch.use_deterministic_algorithms(True)``, which
        :func:`hwrng.manual_seed` sets first, covers torch_npu's operators;
        HCCL reads this variable when a communicator is created, so call
        this before ``init_process_group``.
        """
        if "HCCL_DETERMINISTIC" in os.environ:
            return {}
        os.environ["HCCL_DETERMINISTIC"] = "true"
        return {"HCCL_DETERMINISTIC": "true"}


@hwrng.hookimpl
def hwrng_platforms() -> Sequence[hwrng.Platform]:
    """Provide the NPU platform."""
    return [NPUPlatform()]
