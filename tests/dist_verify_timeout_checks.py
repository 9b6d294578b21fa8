"""What each rank runs in test_verify_timeout_dist.py (importable by the spawned ranks)."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import time
from typing import Any

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import hwrng
from hwrng._collectives import Comm

#: verify's timeout in these tests, in seconds: small, so that a test takes seconds.
TIMEOUT = 1.5


def _seeded() -> Any:
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    hwrng.manual_seed(5, mesh, sharded_dims=["tp"], platform="cpu")
    return mesh


def _verify(**arguments: Any) -> tuple[str, float]:
    """verify's outcome on this rank, in words, and how long it took."""
    started = time.monotonic()
    try:
        report = hwrng.verify(**arguments)
    except hwrng.HwrngError as error:
        return f"{type(error).__name__}: {error}", time.monotonic() - started
    if report.ok:
        return "report ok=True", time.monotonic() - started
    problems = [f"{v.stream} {list(v.ranks)}: {'; '.join(v.problems)}" for v in report.failures]
    return f"report over {report.world_size}: {' | '.join(problems)}", time.monotonic() - started


def absent_rank(fault: str) -> dict[str, Any]:
    """Rank 1 does not reach verify in time: it sleeps, or is stopped (SIGSTOP: its sockets stay
    open, as a hung or swapped-out rank's do) for longer than the others' timeout; then it calls
    verify late. Afterwards every rank verifies again: the ranks are still in step."""
    _seeded()
    rank = dist.get_rank()
    away = TIMEOUT + 3.0  # well past the others giving up, even on a loaded machine
    arrival = importlib.import_module("hwrng.verify._arrival")
    watched = arrival.WATCHED
    if fault == "sleeping, in a large group":  # its ranks wait on the store without polling it
        arrival.WATCHED = 1
    try:
        if rank == 1 and fault.startswith("sleeping"):
            time.sleep(away)
        if rank == 1 and fault == "stopped":
            subprocess.Popen(["sh", "-c", f"sleep {away}; kill -CONT {os.getpid()}"])
            os.kill(os.getpid(), signal.SIGSTOP)
        outcome, seconds = _verify(timeout=TIMEOUT)
    finally:
        arrival.WATCHED = watched
    again, _ = _verify(timeout=30)
    return {"outcome": outcome, "seconds": seconds, "again": again}


def mixed_groups(slow_watcher: bool) -> dict[str, Any]:
    """Rank 1 alone passes group= (ranks 0 and 1); the others verify over the world.

    With ``slow_watcher``, rank 1's first look for a deadlock waits (at most 20 s) until rank 0
    has found it, reported it and gone on to its next call -- as a descheduled rank on a loaded
    machine does: rank 0's new call is not one rank 1 holds up.
    """
    _seeded()
    rank = dist.get_rank()
    pair = dist.new_group([0, 1])
    arrival = importlib.import_module("hwrng.verify._arrival")
    real = arrival._Call._deadlock
    waited: list[bool] = []

    def late_look(call: Any) -> Any:
        if not waited:
            waited.append(True)
            first = call.read_record(0)
            deadline = time.monotonic() + 20
            while call.read_record(0) == first and time.monotonic() < deadline:
                time.sleep(0.02)
        return real(call)

    if slow_watcher and rank == 1:
        arrival._Call._deadlock = late_look
    try:
        outcome, seconds = _verify(timeout=30, **({"group": pair} if rank == 1 else {}))
    finally:
        arrival._Call._deadlock = real
    again, _ = _verify(timeout=30)
    return {"outcome": outcome, "seconds": seconds, "again": again}


def group_calls_stay_in_step() -> list[str]:
    """Ranks 0 and 1 verify over their pair, then every rank over the world, twice."""
    _seeded()
    rank = dist.get_rank()
    pair = dist.new_group([0, 1])
    found = []
    if rank < 2:
        found.append(_verify(group=pair, timeout=30)[0])
    for _ in range(2):
        found.append(_verify(timeout=30)[0])
    return found


def bounded_collective() -> tuple[str, float]:
    """A collective on a group made with torch's 30-minute default that rank 1 never joins:
    the others' Comm with a timeout raises within it. (The group is given up afterwards.)"""
    group = dist.new_group(list(range(dist.get_world_size())))
    rank = dist.get_rank()
    started = time.monotonic()
    if rank == 1:  # it never joins: the others must not wait for it
        return "did not join", 0.0
    try:
        Comm(group, hwrng.get_platform("cpu"), timeout=TIMEOUT).max([rank])
    except hwrng.DistributedError as error:
        return f"DistributedError: {error}", time.monotonic() - started
    return "no error", time.monotonic() - started


def stopped_inside(run: str, where: str) -> dict[str, Any]:
    """Every rank arrives; rank 1 then stalls inside verify until the others have raised (at
    most 30 s): before its first collective over the group (``where="group"``, a group of this
    test's own), or before its first along a mesh dim (``"mesh dim"``: verify over the world;
    the ranks still make the same collectives over it, each raising on a mesh dim's group).
    ``run`` keys the store counter by which the others tell rank 1 they have raised."""
    rank = dist.get_rank()
    store = dist.distributed_c10d._get_default_store()
    raised = f"test/stopped-inside/{run}/raised"
    mesh = _seeded()
    group = dist.new_group(list(range(dist.get_world_size()))) if where == "group" else None
    wire = importlib.import_module("hwrng.verify._wire")
    real = wire._answer

    def stalled(request: Any, *arguments: Any) -> Any:
        if where == "group" or request.axis != wire.WHOLE:
            deadline = time.monotonic() + 30
            while int(store.add(raised, 0)) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
        return real(request, *arguments)

    if rank == 1:
        wire._answer = stalled
    try:
        outcome, seconds = _verify(mesh=mesh, group=group, timeout=TIMEOUT)
    finally:
        wire._answer = real
    if rank != 1:
        store.add(raised, 1)
    _seeded()  # a fresh mesh: the timed-out one's groups are given up
    again, _ = _verify(timeout=30)
    return {"outcome": outcome, "seconds": seconds, "again": again}


def bad_timeout(value: Any) -> str:
    """A timeout that is not a positive duration is refused alike on every rank, at once."""
    from torch.distributed.tensor.debug import CommDebugMode

    _seeded()
    with CommDebugMode() as comms:
        try:
            hwrng.verify(timeout=value)
        except hwrng.HwrngError as error:
            return f"{type(error).__name__} after {comms.get_total_counts()} collective(s)"
    return "no error"


def passes_with(value: Any) -> bool:
    """verify with ``timeout`` given as ``value`` (seconds, or a timedelta) passes."""
    _seeded()
    return hwrng.verify(timeout=value).ok
