"""``hwrng check`` under a launcher: torchrun's variables, all of them or none."""

from __future__ import annotations

import os

from hwrng._cli.check._job import run_rank
from hwrng._cli.check._report import CheckReport
from hwrng._exceptions import MeshError

__all__ = ["LAUNCHER_VARIABLES", "check_launcher_environment", "run_in_torchrun", "under_torchrun"]

#: The variables a launcher such as torchrun sets; the first three say a process was launched.
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
_RANK_VARIABLES = LAUNCHER_VARIABLES[:3]


def under_torchrun() -> bool:
    """Whether this process was started by torchrun (or a launcher that sets its variables)."""
    return all(name in os.environ for name in _RANK_VARIABLES)


def local_ranks() -> int:
    """How many ranks the launcher started on this host (``LOCAL_WORLD_SIZE``, else all)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))


def check_launcher_environment() -> None:
    """Refuse a partial launcher environment (RANK without MASTER_ADDR, ...) in one line."""
    import torch.distributed as dist

    present = [name for name in LAUNCHER_VARIABLES if name in os.environ]
    if not any(name in os.environ for name in _RANK_VARIABLES):
        return
    if dist.is_available() and dist.is_initialized():
        return
    missing = [name for name in LAUNCHER_VARIABLES if name not in os.environ]
    if missing:
        raise MeshError(
            f"{', '.join(present)} set but {', '.join(missing)} not: run hwrng check under "
            "torchrun (which sets all of them), or unset them to let hwrng check start its "
            "own ranks"
        )
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"):
        if not os.environ[name].strip().isdigit():
            raise MeshError(f"{name}={os.environ[name]!r} is not a non-negative integer")


def run_in_torchrun(
    mesh: dict[str, int],
    sharded: list[str],
    seed: int,
    platform_name: str,
    backend: str,
    *,
    timeout: float,
) -> tuple[CheckReport | None, bool]:
    """Run this process's rank under torchrun. Returns (the report on rank 0, else None; ok).

    ``timeout`` (seconds) bounds the process group it makes, ``verify`` and the judging.
    """
    import datetime

    import torch.distributed as dist

    import hwrng

    platform = hwrng.get_platform(platform_name)
    platform.set_device(int(os.environ["LOCAL_RANK"]) % platform.device_count())
    owns_group = not dist.is_initialized()
    if owns_group:
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    try:
        report = CheckReport.from_dict(run_rank(mesh, sharded, seed, platform_name, timeout))
        return (report if dist.get_rank() == 0 else None), report.ok
    finally:
        if owns_group:
            dist.destroy_process_group()
