"""What each rank runs in test_verify_timeout_dist.py (importable by the spawned ranks)."""

from __future__ import annotations

import datetime
import importlib
import os
import signal
import subprocess
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import hwrng
from hwrng._collectives import Comm

#: verify's timeout in these tests, in seconds: small, so that a test takes seconds.
TIMEOUT = 1.5
#: The timeout of the tests where the ranks must not wait for it: any wait of its length is
#: the failure they look for (a verdict comes long before it, even on a loaded machine).
MIXED_TIMEOUT = 30.0
#: The process group's own timeout, in seconds, in the tests of verify's default timeout.
PG_TIMEOUT = 4.0


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


def mixed_groups(slow_watcher: bool, together_with: str, rounds: int = 1) -> dict[str, Any]:
    """Rank 1 alone passes group=; the others verify over the world; ``rounds`` times.

    ``together_with`` is rank 1's group: ``"rank 0"`` (ranks 0 and 1), or
    ``"every rank"`` (a ``new_group`` of all 4 ranks: the same ranks as the
    default group, another process group; every rank can find the mismatch,
    and several often do at once). With ``slow_watcher``, rank 1's first look
    for a deadlock waits (at most 20 s) until rank 0 has found it, reported it
    and gone on to its next call -- as a descheduled rank on a loaded machine
    does: rank 0's new call is not one rank 1 holds up. After each round every
    rank verifies again: still in step.
    """
    _seeded()
    rank = dist.get_rank()
    ranks = [0, 1] if together_with == "rank 0" else list(range(dist.get_world_size()))
    group = dist.new_group(ranks)
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

    found: dict[str, list[Any]] = {"outcomes": [], "seconds": [], "again": []}
    for _ in range(rounds):
        if slow_watcher and rank == 1:
            arrival._Call._deadlock = late_look
        try:
            outcome, seconds = _verify(
                timeout=MIXED_TIMEOUT, **({"group": group} if rank == 1 else {})
            )
        finally:
            arrival._Call._deadlock = real
        found["outcomes"].append(outcome)
        found["seconds"].append(seconds)
        found["again"].append(_verify(timeout=30)[0])
    return {**found, "name": dist.distributed_c10d._get_process_group_name(group)}


def wrong_argument(argument: str, value: Any) -> dict[str, Any]:
    """Only rank 1 passes ``argument=value`` (wrong); the others call ``verify()`` right.

    Rank 1 raises its error; the others must not wait for it."""
    _seeded()
    rank = dist.get_rank()
    arguments = {argument: value} if rank == 1 else {"timeout": MIXED_TIMEOUT}
    outcome, seconds = _verify(**arguments)
    again, _ = _verify(timeout=30)
    return {"outcome": outcome, "seconds": seconds, "again": again}


def _pg_timeout(group: Any) -> datetime.timedelta:
    """A group's timeout, as ``init_process_group(timeout=)`` or ``new_group(timeout=)`` set it."""
    backend = (group or dist.distributed_c10d._get_default_group())._get_backend(
        torch.device("cpu")
    )
    return backend.options._timeout  # type: ignore[no-any-return]


def absent_before_default_timeout(kind: str) -> dict[str, Any]:
    """Rank 1 raised before verify (its step failed); the others call verify with no timeout=.

    The group's own timeout is :data:`PG_TIMEOUT`: the default group's, set
    as ``init_process_group(timeout=...)`` sets it (torch's ``_set_pg_timeout``
    sets the same field of the gloo backend), or a ``new_group(timeout=...)``
    of every rank. Rank 1 then calls verify late (it raises at once), and
    every rank verifies again: still in step.
    """
    _seeded()
    rank = dist.get_rank()
    short = datetime.timedelta(seconds=PG_TIMEOUT)
    group = None
    saved = _pg_timeout(None)
    if kind == "default group":
        dist.distributed_c10d._set_pg_timeout(short)
    else:
        group = dist.new_group(list(range(dist.get_world_size())), timeout=short)
    store = dist.distributed_c10d._get_default_store()
    raised = f"test/default-timeout/{kind}/raised"
    try:
        if rank == 1:
            outcome, seconds = "raised before verify", 0.0
            deadline = time.monotonic() + 30
            while int(store.add(raised, 0)) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            _verify(group=group)  # late: the others gave up; it raises at once
        else:
            outcome, seconds = _verify(group=group)
            store.add(raised, 1)
    finally:
        dist.distributed_c10d._set_pg_timeout(saved)
    again, _ = _verify(timeout=30)
    return {"outcome": outcome, "seconds": seconds, "again": again}


def default_timeouts() -> dict[str, float]:
    """The timeout verify takes by default over groups made with a short and a long timeout."""
    timeouts = importlib.import_module("hwrng.verify._timeout")
    world = list(range(dist.get_world_size()))
    return {
        str(made): timeouts.default_timeout(
            dist.new_group(world, timeout=datetime.timedelta(seconds=made))
        )
        for made in (7, 3600)
    }


def store_keys(rounds: int, steps: int) -> dict[str, Any]:
    """The keys the rendezvous store holds after a first round of every kind of call, and after
    ``rounds`` more and ``steps`` more store steps; how many calls rank 0 made; its outcomes.

    A round: a mismatch (rank 1 alone with ``group=pair``), a call refused on rank 1
    (``streams="torch.cpu"``), ranks 0 and 1's ``verify(group=pair)``, every rank's
    ``verify()``. A
    step: verify's store step alone (``arrive``, what verify runs before any collective: the
    only part of it that writes the store) over the world, and every other step over the pair
    too on ranks 0 and 1 -- so that a thousand calls take a second or two, not a minute.
    """
    _seeded()
    rank = dist.get_rank()
    pair = dist.new_group([0, 1])
    store = dist.distributed_c10d._get_default_store()
    arrival = importlib.import_module("hwrng.verify._arrival")
    outcomes: list[str] = []

    def one_round() -> None:  # ending, as the steps do, with a call over each group that passes
        outcomes.append(_verify(timeout=30, **({"group": pair} if rank == 1 else {}))[0])
        outcomes.append(_verify(timeout=30, **({"streams": "torch.cpu"} if rank == 1 else {}))[0])
        if rank < 2:
            outcomes.append(_verify(group=pair, timeout=30)[0])
        outcomes.append(_verify(timeout=30)[0])

    one_round()
    dist.barrier()  # every rank's calls are over, and none has begun the next: count
    first = int(store.num_keys())
    dist.barrier()
    for _ in range(rounds):
        one_round()
    made = len(outcomes)
    for step in range(steps):
        assert arrival.arrive(None, 30.0) is None
        made += 1
        if rank < 2 and step % 2 == 0:
            assert arrival.arrive(pair, 30.0) is None
            made += 1
    outcomes.append(_verify(timeout=30)[0])
    dist.barrier()
    return {"first": first, "last": int(store.num_keys()), "made": made + 1, "outcomes": outcomes}


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
    """A timeout that is not a positive duration within the bound is refused alike on every
    rank, at once; the process group is still usable after it (a plain ``all_reduce``)."""
    from torch.distributed.tensor.debug import CommDebugMode

    _seeded()
    outcome = "no error"
    with CommDebugMode() as comms:
        try:
            hwrng.verify(timeout=value)
        except hwrng.HwrngError as error:
            outcome = f"{type(error).__name__} after {comms.get_total_counts()} collective(s)"
    total = torch.ones(1)
    dist.all_reduce(total)
    return f"{outcome}; then all_reduce gives {total.item():g}"


def passes_with(value: Any) -> bool:
    """verify with ``timeout`` given as ``value`` (seconds, or a timedelta) passes."""
    _seeded()
    return hwrng.verify(timeout=value).ok
