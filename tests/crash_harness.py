"""Kill one rank at every file event of a save, resume a fresh job, and say what came back.

A *job* is ``world`` processes in one gloo process group, each running the same
function, as torchrun would start them. To start jobs by the hundred on 2
cores, a *zygote* (a process started once, which imports torch, hwrng and the
trainer) forks each job's ranks; a forked rank is a fresh process for hwrng
(the zygote never seeds, draws or joins a group).

Inside a rank, every *file event* under the job's checkpoint root is counted
once :func:`arm` is called: each ``torch.save`` to a path, each open for
writing (``open``, ``io.open``, ``os.open``), each ``os.replace`` and
``os.rename``, each removal (``os.unlink``, ``os.remove``, ``os.rmdir``,
``shutil.rmtree``), and what a save path adds with :func:`count_event` (a
write no Python call shows, such as safetensors'). A *kill point* ``(rank, i)``
makes that rank ``os._exit`` just before its ``i``-th event; a *failure point*
raises ``OSError(ENOSPC)`` there instead, and at every later write of that rank
(a full disk). When a rank dies, the
others get :data:`GRACE_S` seconds to finish or fail (gloo fails a collective
whose peer is gone), then are killed, as torchrun does; a job that does not end
within its timeout is a *hang*.

Each point is then resumed by a fresh job from the same path, as a user would,
and classified against the uninterrupted run (:func:`classify`):

``EXACT``   every rank resumed, drawing what the uninterrupted run drew after the
            save the trainer's checkpoint holds;
``LOUD``    refused, by the trainer (its own file missing or torn) or by hwrng
            naming the rank and what to do;
``SILENT``  resumed with any draw different;
``LOST``    hwrng refused a complete checkpoint the trainer holds;
``MUTE``    hwrng refused without saying what to do;
``HANG``    a job did not end.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime
import errno
import importlib
import io
import multiprocessing
import os
import pickle
import shutil
import signal
import socket
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

KILLED = 77  # the exit code of a rank killed at a file event
GRACE_S = 5.0  # how long the other ranks of a job may run on after one died
RESULTS = ("EXACT", "LOUD", "SILENT", "LOST", "MUTE", "HANG")

# -- inside a rank: the file events --------------------------------------------------


@dataclass
class _Recorder:
    root: str = ""
    armed: bool = False
    count: int = 0
    kill_at: int | None = None
    fail_at: int | None = None
    at: str | None = None  # cut at the first event whose description holds this
    at_kills: bool = True  # ... by a kill (else by a failure)
    disk_full: bool = False  # a failure happened: every later write fails too
    log: list[tuple[str, str]] = field(default_factory=list)
    result_file: str = ""


_RECORDER = _Recorder()


def _under_root(path: Any) -> str | None:
    if isinstance(path, int) or path is None:
        return None
    try:
        text = os.path.abspath(os.fsdecode(path))
    except TypeError:
        return None
    root = _RECORDER.root
    return os.path.relpath(text, root) if text.startswith(root + os.sep) else None


def count_event(kind: str, *paths: Any) -> None:
    """Count one file event (if armed and under the root): kill or fail here if told to."""
    recorder = _RECORDER
    if not recorder.armed:
        return
    names = [name for name in (_under_root(p) for p in paths) if name is not None]
    if not names:
        return
    recorder.count += 1
    recorder.log.append((kind, " -> ".join(names)))
    if recorder.at is not None and recorder.at in " ".join(recorder.log[-1]):
        recorder.at = None
        if recorder.at_kills:
            recorder.kill_at = recorder.count
        else:
            recorder.fail_at = recorder.count
    if recorder.count == recorder.kill_at:
        _write_result(("killed", recorder.log))
        os._exit(KILLED)
    writes = kind in ("open", "torch.save", "safetensors")
    if recorder.count == recorder.fail_at or (recorder.disk_full and writes):
        recorder.disk_full = True
        raise OSError(errno.ENOSPC, "No space left on device (injected)", names[-1])


def arm() -> None:
    """Start counting file events (call on every rank just before the save under test)."""
    _RECORDER.armed = True


def disarm() -> None:
    """Stop counting: the save under test is over."""
    _RECORDER.armed = False


def _install_hooks() -> None:
    import torch

    real_open, real_os_open = builtins.open, os.open
    real = {name: getattr(os, name) for name in ("replace", "rename", "unlink", "remove", "rmdir")}
    real_rmtree, real_save = shutil.rmtree, torch.save
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def opened(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(mode, str) and any(c in mode for c in "wax+"):
            count_event("open", file)
        return real_open(file, mode, *args, **kwargs)

    def os_opened(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & writing:
            count_event("open", path)
        return real_os_open(path, flags, *args, **kwargs)

    def hooked(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            count_event(name, *args[:2])
            return real[name](*args, **kwargs)

        return call

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> Any:
        count_event("rmtree", path)
        return real_rmtree(path, *args, **kwargs)

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, os.PathLike)):
            count_event("torch.save", f)
        return real_save(obj, f, *args, **kwargs)

    builtins.open = opened
    io.open = opened  # type: ignore[assignment]
    os.open = os_opened
    for name in real:
        setattr(os, name, hooked(name))
    shutil.rmtree = rmtree  # type: ignore[assignment]
    torch.save = save


def _write_result(result: Any) -> None:
    with builtins.open(_RECORDER.result_file + ".tmp", "wb") as file:
        pickle.dump(result, file)
    os.rename(_RECORDER.result_file + ".tmp", _RECORDER.result_file)  # the real one: not counted


def _rank_main(
    rank: int, world: int, port: int, job: tuple[str, str, tuple[Any, ...]], point: Point, out: str
) -> None:
    code = 1
    try:
        recorder = _RECORDER
        recorder.root = os.path.abspath(point.root)
        recorder.result_file = os.path.join(out, f"rank-{rank}.pkl")
        mine = point.rank == rank
        by_index = mine and point.at is None
        recorder.kill_at = point.index if by_index and point.kill else None
        recorder.fail_at = point.index if by_index and not point.kill else None
        recorder.at, recorder.at_kills = (point.at if mine else None), point.kill
        os.environ.update(
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(world),
            NODE_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=60),
        )
        _install_hooks()
        module, name, args = job
        value = getattr(importlib.import_module(module), name)(*args)
        result: Any = ("ok", value, _RECORDER.log)
        code = 0
    except BaseException as error:  # what the job raised is the result
        result = ("error", type(error).__name__, str(error), traceback.format_exc(), _RECORDER.log)
    try:
        _write_result(result)
    finally:
        os._exit(code)


# -- the zygote: forks the ranks of each job -----------------------------------------


@dataclass(frozen=True)
class Point:
    """Where a job is cut: ``rank`` dies (``kill``) or fails at its ``index``-th event.

    With ``at``, at the first event whose description holds that text instead.
    """

    root: str
    rank: int = -1
    index: int = 0
    kill: bool = True
    at: str | None = None


@dataclass
class JobResult:
    """What each rank of a job did: ``("ok", value, log)``, error, ``("killed", log)``."""

    ranks: list[Any]
    codes: list[int | None]
    hang: bool
    seconds: float

    def values(self) -> list[Any] | None:
        """Every rank's return value, or ``None`` if any rank did not return."""
        if self.hang or any(r is None or r[0] != "ok" for r in self.ranks):
            return None
        return [r[1] for r in self.ranks]

    def errors(self) -> list[tuple[str, str]]:
        """``(type name, message)`` of every rank that raised."""
        return [(r[1], r[2]) for r in self.ranks if r is not None and r[0] == "error"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_job(
    job: tuple[str, str, tuple[Any, ...]], world: int, point: Point, timeout: float
) -> JobResult:
    out = tempfile.mkdtemp(prefix="hwrng-job-")
    port = _free_port()
    started = time.monotonic()
    ranks_of: dict[int, int] = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            _rank_main(rank, world, port, job, point, out)
        ranks_of[pid] = rank
    codes: list[int | None] = [None] * world
    first_end: float | None = None
    hang = False
    while any(code is None for code in codes):
        pid, status = os.waitpid(-1, os.WNOHANG)
        now = time.monotonic()
        if pid == 0:
            late = first_end is not None and now > first_end + GRACE_S
            if late or now > started + timeout:
                hang = hang or not late
                for other, rank in ranks_of.items():
                    if codes[rank] is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(other, signal.SIGKILL)
                first_end = now + 3600  # killed: wait for them without killing again
            time.sleep(0.005)
            continue
        codes[ranks_of[pid]] = os.waitstatus_to_exitcode(status)
        if first_end is None and codes[ranks_of[pid]] != 0:
            first_end = now
    ranks: list[Any] = []
    for rank in range(world):
        try:
            with builtins.open(os.path.join(out, f"rank-{rank}.pkl"), "rb") as file:
                ranks.append(pickle.load(file))
        except FileNotFoundError:
            ranks.append(None)  # killed by the harness after another rank died
    shutil.rmtree(out, ignore_errors=True)
    return JobResult(ranks, codes, hang, time.monotonic() - started)


def _zygote_main(connection: Any, preload: Sequence[str]) -> None:
    for module in preload:
        importlib.import_module(module)
    while True:
        try:
            message = connection.recv()
        except EOFError:  # the test process went away
            return
        if message is None:
            return
        connection.send(_run_job(*message))


class Zygote:
    """A process that imports ``preload`` once and forks the ranks of every job."""

    def __init__(self, preload: Sequence[str]) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_zygote_main, args=(child, tuple(preload)))
        self._process.start()
        child.close()

    def run(
        self,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        *,
        world: int,
        point: Point,
        timeout: float = 120.0,
    ) -> JobResult:
        """Run ``function(*args)`` on every rank of a new job, cut at ``point``."""
        job = (function.__module__, function.__qualname__, args)
        self._connection.send((job, world, point, timeout))
        if not self._connection.poll(timeout + 60):
            raise RuntimeError("the zygote did not answer")
        result: JobResult = self._connection.recv()
        return result

    def close(self) -> None:
        """Stop the zygote."""
        with contextlib.suppress(OSError, ValueError):
            self._connection.send(None)
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# -- the matrix ------------------------------------------------------------------------


@dataclass(frozen=True)
class SavePath:
    """One way of saving that the matrix cuts and resumes.

    ``save(root)`` runs on every rank: it saves once (complete), draws, calls
    :func:`arm`, saves again to the same place, calls :func:`disarm`, draws
    again, and returns ``{1: draws after save 1, 2: draws after save 2}`` (and
    more saves, where a path makes more: two runs overlapping).
    ``resume(root)`` runs on every rank of a fresh job: it resumes as a user
    would and returns the draws that follow. ``present(root)``, in the test
    process, says which save the trainer's checkpoint holds (1, 2, ..., or
    ``None`` when it holds none). ``prepare(root)``, where given, runs
    in the test process between the cut save and the resume, and says where
    the resume looks: a copy of the folder (``cp -rL``), which must be
    ``root + "-copy"``, instead of ``root``. ``lost_by_trainer``: the trainer itself
    overwrites its checkpoint in place (a DCP directory saved over), so a
    refusal of a mix there is the trainer's loss, refused loudly.
    """

    name: str
    save: Callable[[str], dict[int, Any]]
    resume: Callable[[str], Any]
    present: Callable[[str], int | None]
    lost_by_trainer: bool = False
    prepare: Callable[[str], str] | None = None


_REMEDIES = ("on_mismatch='reseed'", "resume from", "new directory")


def classify(
    path: SavePath, present: int | None, resumed: JobResult, reference: dict[int, list[Any]]
) -> str:
    """One kill point's class (see the module notes)."""
    if resumed.hang:
        return "HANG"
    draws = resumed.values()
    if draws is not None:
        return "EXACT" if present is not None and draws == reference[present] else "SILENT"
    refusals = [message for kind, message in resumed.errors() if kind == "CheckpointError"]
    if not refusals:
        return "LOUD"  # the trainer's own error
    if present is not None and not (
        path.lost_by_trainer and all("not written by the save" in m for m in refusals)
    ):
        return "LOST"
    named = all("rank" in m and any(r in m for r in _REMEDIES) for m in refusals)
    return "LOUD" if named else "MUTE"


@dataclass
class Matrix:
    """The outcome of every point run, and how many points there were."""

    path: str
    world: int
    events: list[list[tuple[str, str]]]  # each rank's file events of an uninterrupted save
    outcomes: dict[tuple[int, int], str]
    total: int
    seconds: float
    notes: dict[tuple[int, int], str] = field(default_factory=dict)

    def counts(self) -> Counter[str]:
        """How many points fell in each class."""
        return Counter(self.outcomes.values())

    def row(self) -> str:
        """One line of the table in docs/checkpoint.md."""
        counts = self.counts()
        cells = " | ".join(str(counts.get(name, 0)) for name in RESULTS[:4])
        return f"| {self.path} | {self.world} | {len(self.outcomes)} of {self.total} | {cells} |"


def _spread(points: list[tuple[int, int]], sample: int | None) -> list[tuple[int, int]]:
    """All points, or ``sample`` of them spread evenly (the first and last always in)."""
    if sample is None or sample >= len(points):
        return points
    step = (len(points) - 1) / (sample - 1)
    return [points[round(k * step)] for k in range(sample)]


def fresh_root(base: str, name: str) -> str:
    """An empty checkpoint root under ``base``."""
    root = os.path.join(base, name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    return root


def _resume(zygote: Zygote, path: SavePath, root: str, world: int, timeout: float) -> JobResult:
    """A fresh job resumes from ``root`` (or from where ``path.prepare`` put a copy of it)."""
    place = root if path.prepare is None else path.prepare(root)
    return zygote.run(path.resume, (place,), world=world, point=Point(place), timeout=timeout)


def run_matrix(
    zygote: Zygote,
    path: SavePath,
    base: str,
    *,
    world: int,
    sample: int | None = None,
    kill: bool = True,
    timeout: float = 120.0,
) -> Matrix:
    """Cut ``path``'s second save at every file event of every rank (or ``sample`` of them)."""
    started = time.monotonic()
    root = fresh_root(base, "uninterrupted")
    reference_run = zygote.run(path.save, (root,), world=world, point=Point(root), timeout=timeout)
    values = reference_run.values()
    assert values is not None, reference_run.ranks
    reference = {k: [v[k] for v in values] for k in values[0]}
    events = [r[2] for r in reference_run.ranks]
    resumed = _resume(zygote, path, root, world, timeout)
    last = path.present(root)  # 2, or a later save the trainer made as it went on
    assert last is not None and last >= 2 and resumed.values() is not None, resumed.ranks
    assert last != 2 or resumed.values() == reference[2], resumed.ranks
    points = [(r, i) for r in range(world) for i in range(1, len(events[r]) + 1)]
    outcomes: dict[tuple[int, int], str] = {}
    notes: dict[tuple[int, int], str] = {}
    for rank, index in _spread(points, sample):
        root = fresh_root(base, f"cut-{rank}-{index}")
        cut = Point(root, rank, index, kill)
        saved = zygote.run(path.save, (root,), world=world, point=cut, timeout=timeout)
        present = path.present(root)
        if saved.hang:
            outcomes[rank, index] = "HANG"
            continue
        resumed = _resume(zygote, path, root, world, timeout)
        outcomes[rank, index] = classify(path, present, resumed, reference)
        notes[rank, index] = f"present={present} " + "; ".join(
            f"{kind}: {message[-700:]}" for kind, message in resumed.errors()[:1]
        )
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(root + "-copy", ignore_errors=True)
    return Matrix(
        path.name, world, events, outcomes, len(points), time.monotonic() - started, notes
    )


@contextlib.contextmanager
def zygote_for(*preload: str) -> Iterator[Zygote]:
    """A zygote for the duration of a block."""
    zygote = Zygote(preload)
    try:
        yield zygote
    finally:
        zygote.close()
