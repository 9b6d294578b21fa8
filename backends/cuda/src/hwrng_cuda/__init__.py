"""hwrng's CUDA backend (``hwrng-cuda``): ``torch.cuda`` generators, ``nccl`` for collectives.

CUDA generators are Philox with a native ``(seed, offset)`` counter, read and
set on the host through ``Generator.get_offset``/``set_offset``: hwrng's
tracked regions never copy RNG state through device memory and never wait on
the device.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import ClassVar

import torch

import hwrng

__all__ = ["CUBLAS_WORKSPACE_CONFIG", "CUDAPlatform", "hwrng_platforms"]

#: The cuBLAS workspace setting torch's reproducibility notes require for
#: deterministic cuBLAS (":16:8" is the other accepted value).
CUBLAS_WORKSPACE_CONFIG = ":4096:8"


class CUDAPlatform(hwrng.DeviceModulePlatform):
    """NVIDIA (or ROCm) GPUs through ``torch.cuda``.

    Named states (:class:`hwrng.RNGStatesTracker`) are graph-safe generator
    states, swapped in and out of the device generator without a copy
    (``graphsafe_get_state``/``graphsafe_set_state``), as Megatron-LM and
    TransformerEngine do: a fork works inside ``torch.cuda.graph`` capture once
    the states are registered with the graph
    (``tracker.register_graph_states(graph)``), and each replay draws new
    numbers.
    """

    name: ClassVar[str] = "cuda"
    dist_backend: ClassVar[str] = "nccl"
    capabilities: ClassVar[frozenset[str]] = frozenset({"dtensor", "graph_safe_states"})

    def stream_capturing(self) -> bool:
        """Whether the current CUDA stream is being captured (``torch.cuda.graph``)."""
        return bool(torch.cuda.is_current_stream_capturing())

    def detached_state(self, generator: torch.Generator, seed: int) -> object:
        """A new graph-safe state at ``(seed, 0)``: a clone of the generator's, re-seeded."""
        state = generator.clone_state()
        state.manual_seed(seed)
        return state

    def swap_in(self, generator: torch.Generator, state: object) -> object:
        """Point the generator at ``state`` (no copy); return what it pointed at."""
        assert isinstance(state, torch.Generator)
        previous = generator.graphsafe_get_state()
        generator.graphsafe_set_state(state)
        return previous

    def swap_out(self, generator: torch.Generator, token: object) -> object:
        """Point the generator back at ``token``; the named state advanced in place."""
        assert isinstance(token, torch.Generator)
        advanced = generator.graphsafe_get_state()
        generator.graphsafe_set_state(token)
        return advanced

    def state_tensor(self, state: object) -> torch.Tensor:
        """The 16-byte ``(seed, offset)`` state of a named state, for checkpoints."""
        assert isinstance(state, torch.Generator)
        return state.get_state()

    def state_from_tensor(self, generator: torch.Generator, tensor: torch.Tensor) -> object:
        """A graph-safe state holding a saved 16-byte state."""
        state = generator.clone_state()
        state.set_state(tensor)
        return state

    def state_digest(self, state: torch.Tensor) -> bytes:
        """The whole 16-byte ``(seed, offset)`` Philox state: every byte of it changes the draws.

        Philox keys with all 64 bits of the seed (:func:`hwrng.whole_state_digest`).
        """
        return hwrng.whole_state_digest(state)

    def not_available_detail(self, module: hwrng.DeviceModule) -> str:
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
