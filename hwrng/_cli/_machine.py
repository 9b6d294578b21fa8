"""What machine this is, in words, for reports (``hwrng check``, ``hwrng conformance``)."""

from __future__ import annotations

import os
import platform as host

from hwrng._platform import Platform

__all__ = ["describe_device"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return host.processor() or host.machine() or "host CPU"


def describe_device(platform: Platform) -> str:
    """Name the device hardware behind ``platform``, e.g. ``NVIDIA H100 80GB HBM3``."""
    if platform.device_type == "cpu":
        return _cpu_model()
    names = getattr(platform.device_handle, "get_device_name", None)
    if callable(names):
        try:
            return str(names(platform.current_device()))
        except Exception as error:  # a name is for display only
            return f"{platform.name} device ({type(error).__name__})"
    return f"{platform.name} device"
