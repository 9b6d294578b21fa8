"""hwrng's CPU backend: torch's CPU generator, with ``gloo`` for collectives.

torch's CPU generator is a Mersenne Twister with no counter; this backend
gives it hwrng's ``(seed, offset)`` view through :class:`hwrng.MersenneCounter`
(the shared one :func:`hwrng.host_counter` returns). It also keys the generator with all
64 bits of a seed: torch's own CPU seeding keeps only the low 32 bits, so
``torch.manual_seed(s)`` and ``torch.manual_seed(s + 2**32)`` draw the same
numbers. For seeds below ``2**32`` hwrng seeds exactly as torch does.
"""

from __future__ import annotations

import os
import platform as host
from collections.abc import Sequence
from typing import ClassVar

import torch

import hwrng

__all__ = ["CPUPlatform", "hwrng_platforms"]


class CPUPlatform(hwrng.Platform):
    """The host CPU: one device, always available, lowest priority.

    Its one device draws from the host generator (:attr:`uses_host_generator`),
    and any number of ranks share it over gloo (:attr:`one_rank_per_device` is
    ``False``).
    """

    name: ClassVar[str] = "cpu"
    dist_backend: ClassVar[str] = "gloo"
    priority: ClassVar[int] = 0
    one_rank_per_device: ClassVar[bool] = False  # gloo runs any number of ranks on the host

    @property
    def counter(self) -> hwrng.CounterView:
        """The emulated counter view of the host's Mersenne-Twister generator."""
        return hwrng.host_counter()

    def unavailable_reason(self) -> str | None:
        """Return ``None``: the CPU is always available."""
        return None

    @property
    def device_handle(self) -> object:
        """``torch.cpu``."""
        return torch.cpu

    def device_count(self) -> int:
        """Return 1: hwrng treats the host as a single device."""
        return 1

    def current_device(self) -> int:
        """Return 0."""
        return 0

    def device(self, device: hwrng.DeviceLike = None) -> torch.device:
        """Return ``torch.device("cpu")`` after checking ``device`` names the CPU."""
        self.device_index(device)
        return torch.device("cpu")

    def generator(self, device: hwrng.DeviceLike = None) -> torch.Generator:
        """Return ``torch.default_generator``."""
        self.device_index(device)
        return torch.default_generator

    def state_digest(self, state: torch.Tensor) -> bytes:
        """What torch's Mersenne Twister in ``state`` draws: :func:`hwrng.mersenne_state_digest`.

        The digest is taken from the state that draws -- the words output
        before the next twist, the 624 words that twist makes, a valid cached
        normal sample -- never from stored bytes no draw reads: the 64-bit seed
        (torch keys the generator with its low 32 bits), word 0's low 31 bits,
        the high half of each word slot.
        """
        return hwrng.mersenne_state_digest(state)

    def describe_device(self) -> str:
        """The processor's model and core count, e.g. ``AMD EPYC (2 cores)``."""
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
                for line in cpuinfo:
                    if line.startswith("model name"):
                        return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
        except OSError:
            pass
        return host.processor() or host.machine() or "host CPU"


@hwrng.hookimpl
def hwrng_platforms() -> Sequence[hwrng.Platform]:
    """Provide the CPU platform."""
    return [CPUPlatform()]
