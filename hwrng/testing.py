"""Test with real ``torch.distributed`` processes: a pool that runs many checks each.

This is how hwrng's own multi-process tests, the conformance suite and a
backend's tests run code on several ranks. Starting processes is the slow part
of a multi-process test (each imports torch), so a :class:`DistributedPool`
starts its ranks once, joins them into a process group, and then runs any
number of functions on every rank::

    with DistributedPool(4) as pool:
        results = pool.run(my_module.check_something, 123)  # one result per rank

Functions and their arguments travel by pickle, so a function must be
importable by its module path in a fresh interpreter (a module-level function
of a package or of a test module). If any rank raises, :meth:`run` raises
:class:`WorkerError` with every failing rank's traceback; the pool is then
stopped and restarts at the next :meth:`run`, so one failure cannot hang or
poison later checks.

The ranks meet through a ``TCPStore`` the parent hosts on 127.0.0.1, and gloo
binds to the loopback interface, so a single-host pool never depends on the
host name resolving to loopback and leaves no files behind. Ranks never
outlive the parent: each watches its parent's pid and exits when it is gone
(killed by SIGKILL, or by a SIGTERM it did not handle).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import multiprocessing
import multiprocessing.connection
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hwrng._exceptions import NO_ANSWER as _NO_ANSWER
from hwrng._exceptions import DistributedError, WorkerError

__all__ = ["DistributedPool", "WorkerError"]

_STOP = "stop"
_PARENT_POLL_S = 0.25


@dataclass(frozen=True)
class _Failure:
    rank: int
    text: str


def _loopback_interface() -> str | None:
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return None
    return next((name for name in names if name.startswith("lo")), None)


def _exit_with_parent(parent_pid: int) -> None:
    """Exit this rank as soon as its parent is gone (even while it waits in a collective)."""

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(70)
            time.sleep(_PARENT_POLL_S)

    threading.Thread(target=watch, name="hwrng-parent-watch", daemon=True).start()


def _worker_main(
    *,
    rank: int,
    world_size: int,
    port: int,
    parent_pid: int,
    backend: str,
    platform_name: str | None,
    timeout_s: float,
    connection: multiprocessing.connection.Connection,
) -> None:
    _exit_with_parent(parent_pid)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    loopback = _loopback_interface()
    if backend == "gloo" and loopback is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(world_size)
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        if platform_name is not None:
            import hwrng

            platform = hwrng.get_platform(platform_name)
            platform.set_device(rank % platform.device_count())
        store = dist.TCPStore(  # type: ignore[attr-defined]  # exported, untyped
            "127.0.0.1", port, is_master=False, timeout=timeout
        )
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=world_size, timeout=timeout
        )
        connection.send(("ready", None))
    except BaseException:
        connection.send(("error", traceback.format_exc()))
        return
    try:
        while True:
            try:
                message = connection.recv()
            except EOFError:  # the parent went away
                break
            if message == _STOP:
                break
            function, args, kwargs = message
            try:
                connection.send(("ok", function(*args, **kwargs)))
            except BaseException:
                connection.send(("error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class DistributedPool:
    """``nproc`` processes in one ``torch.distributed`` process group on this host.

    Parameters
    ----------
    nproc
        The world size.
    backend
        The ``torch.distributed`` backend (``"gloo"`` runs anywhere).
    platform
        If given, each rank selects device ``rank % device_count`` of this
        hwrng platform (:meth:`hwrng.Platform.set_device`) before joining the
        group. :func:`hwrng.collective_backend` chooses a ``backend`` that
        fits it.
    timeout
        Seconds a collective, or one :meth:`run`, may take before the ranks
        are considered hung.
    progress
        Called with a line of text as the ranks start (they take seconds).
    """

    def __init__(
        self,
        nproc: int,
        *,
        backend: str = "gloo",
        platform: str | None = None,
        timeout: float = 120.0,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if nproc < 1:
            raise DistributedError(f"nproc must be >= 1, got {nproc}")
        self.nproc = nproc
        self.backend = backend
        self.platform = platform
        self.timeout = timeout
        self._progress = progress
        self._processes: list[Any] = []
        self._connections: list[multiprocessing.connection.Connection] = []
        self._store: Any = None

    def __enter__(self) -> DistributedPool:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        """Whether the ranks are started and usable."""
        return bool(self._processes)

    def _say(self, text: str) -> None:
        if self._progress is not None:
            self._progress(text)

    def start(self) -> None:
        """Start the ranks and wait until each has joined the process group."""
        if self.running:
            return
        import torch.distributed as dist

        atexit.register(self.close)  # ranks are not daemons: never leave them behind
        self._store = dist.TCPStore(  # type: ignore[attr-defined]  # exported, untyped
            "127.0.0.1",
            0,
            is_master=True,
            wait_for_workers=False,
            timeout=datetime.timedelta(seconds=self.timeout),
        )
        context = multiprocessing.get_context("spawn")
        self._say(f"starting {self.nproc} rank(s) on {self.backend} (rendezvous 127.0.0.1)")
        started = time.monotonic()
        for rank in range(self.nproc):
            parent, child = context.Pipe()
            process = context.Process(
                target=_worker_main,
                kwargs={
                    "rank": rank,
                    "world_size": self.nproc,
                    "port": self._store.port,
                    "parent_pid": os.getpid(),
                    "backend": self.backend,
                    "platform_name": self.platform,
                    "timeout_s": self.timeout,
                    "connection": child,
                },
                # not a daemon: a rank may start DataLoader workers of its own
                daemon=False,
                name=f"hwrng-rank-{rank}",
            )
            process.start()
            child.close()
            self._processes.append(process)
            self._connections.append(parent)
        joined: list[int] = []

        def report(rank: int, status: str, payload: Any) -> None:
            joined.append(rank)
            self._say(f"rank {rank} joined ({len(joined)}/{self.nproc})")

        failures = self._collect(report, self.timeout + 60)
        if failures:
            self.close()
            raise WorkerError(
                self._describe("starting the pool", failures),
                tuple((f.rank, f.text) for f in sorted(failures, key=lambda f: f.rank)),
            )
        self._say(f"{self.nproc} rank(s) ready in {time.monotonic() - started:.1f} s")

    def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """Run ``function(*args, **kwargs)`` on every rank; return the results by rank.

        Raises
        ------
        WorkerError
            If any rank raised, died or did not answer in time; the pool is stopped.
        """
        if not self.running:
            self.start()
        for connection in self._connections:
            connection.send((function, args, kwargs))
        results: list[Any] = [None] * self.nproc

        def keep(rank: int, status: str, payload: Any) -> None:
            results[rank] = payload

        failures = self._collect(keep, self.timeout)
        if failures:
            self.close()
            name = getattr(function, "__qualname__", repr(function))
            raise WorkerError(
                self._describe(f"running {name}", failures),
                tuple((f.rank, f.text) for f in sorted(failures, key=lambda f: f.rank)),
            )
        return results

    def _collect(self, keep: Callable[[int, str, Any], None], timeout: float) -> list[_Failure]:
        """Wait for one message from every rank; return the failures."""
        pending = set(range(self.nproc))
        failures: list[_Failure] = []
        deadline = time.monotonic() + timeout
        while pending:
            if failures:  # peers of a failed rank may hang in a collective: give them a moment
                deadline = min(deadline, time.monotonic() + 10)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                failures.extend(
                    _Failure(r, f"{_NO_ANSWER} (waiting in a collective for a failed rank?)")
                    for r in sorted(pending)
                )
                break
            ready = multiprocessing.connection.wait(
                [self._connections[r] for r in pending], timeout=min(remaining, 1.0)
            )
            for ready_connection in ready:
                rank = next(r for r in pending if self._connections[r] is ready_connection)
                pending.discard(rank)
                try:
                    status, payload = self._connections[rank].recv()
                except EOFError:
                    failures.append(_Failure(rank, "the process died"))
                    continue
                if status == "error":
                    failures.append(_Failure(rank, payload))
                else:
                    keep(rank, status, payload)
            for rank in list(pending):
                if not self._processes[rank].is_alive():
                    pending.discard(rank)
                    code = self._processes[rank].exitcode
                    failures.append(_Failure(rank, f"the process died (exit code {code})"))
        return failures

    @staticmethod
    def _describe(what: str, failures: list[_Failure]) -> str:
        parts = [f"{len(failures)} rank(s) failed {what}:"]
        for failure in sorted(failures, key=lambda f: f.rank):
            parts.append(f"--- rank {failure.rank} ---\n{failure.text.rstrip()}")
        return "\n".join(parts)

    def close(self) -> None:
        """Stop the ranks (politely, then by force) and clean up."""
        for connection in self._connections:
            with contextlib.suppress(OSError, ValueError):  # a dead rank's pipe is closed
                connection.send(_STOP)
        for process in self._processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        for connection in self._connections:
            connection.close()
        self._processes = []
        self._connections = []
        self._store = None
        atexit.unregister(self.close)
