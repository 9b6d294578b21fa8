"""Every collective hwrng issues, each of a size that does not grow with the world.

At thousands of ranks a per-rank cost that grows with the world size is the
one that hurts, so checkpoints and verification talk only through:

* :meth:`Comm.max` and :meth:`Comm.sum`: an ``all_reduce`` of a few int64
  words (a minimum is the maximum of negated words);
* :meth:`Comm.broadcast_text`: one fixed-size message from one rank, sent
  only on a path that has already failed;
* :meth:`Comm.exchange`: an ``all_to_all`` within *one mesh dim's group*:
  one word per member (how many words follow), then the words each member is
  sent -- a few per rank, whatever the group's size;
* :meth:`Comm.gather_rows`: an ``all_gather`` of fixed-size rows within one
  group, used only where no mesh is known (its cost grows with the group, and
  the callers say when).

Words are non-negative integers below ``2**62`` (:data:`WORD_LIMIT`), so a
negated word never overflows. Without an initialised process group a
:class:`Comm` is a world of one, and every method answers without
communicating.

A :class:`Comm` given a ``timeout`` bounds each of its collectives by it,
whatever timeout the group was created with (torch's default is 30 minutes):
the collective is issued with the backend's per-operation timeout (c10d's
``*Options.timeout``), and one that does not complete in time raises
:class:`~hwrng.DistributedError` (gloo's transport fails the operation; NCCL's
watchdog aborts the communicator, as its own settings say).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hwrng._exceptions import DistributedError

if TYPE_CHECKING:
    from hwrng._platform import Platform

__all__ = [
    "MESSAGE_BYTES",
    "WORD_LIMIT",
    "Comm",
    "digest62",
    "digest_of",
    "distributed",
    "group_name",
    "group_timeout",
    "played_by_one_process",
    "rank_and_size",
]

#: Every word a :class:`Comm` reduces lies in ``[0, WORD_LIMIT)``.
WORD_LIMIT = 2**62
#: The size of the one message :meth:`Comm.broadcast_text` sends.
MESSAGE_BYTES = 4096

_CPU_BACKENDS = ("gloo", "fake", "mpi")


def distributed() -> bool:
    """Whether ``torch.distributed`` is available and initialised in this process."""
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def rank_and_size() -> tuple[int, int]:
    """The global rank of this process and the world size; ``(0, 1)`` without a process group."""
    if not distributed():
        return 0, 1
    import torch.distributed as dist

    return int(dist.get_rank()), int(dist.get_world_size())


def played_by_one_process(group: Any = None) -> bool:
    """Whether ``group`` is torch's fake process group: one process playing every rank.

    Its collectives answer at once with no data; nothing outside the process
    (the rendezvous store) can be met. hwrng measures its costs with it.
    """
    import torch.distributed as dist

    return str(dist.get_backend(group)) == "fake"


def group_timeout(group: Any = None) -> float | None:
    """The timeout ``group`` was made with, in seconds (``None`` for the default group).

    What its backends hold (``init_process_group(timeout=...)``,
    ``new_group(timeout=...)``, or torch's ``_set_pg_timeout`` since): the
    least of them where a group has several (``cpu:gloo,cuda:nccl``); ``None``
    where no backend says (a third-party backend without ``options``).
    """
    import torch.distributed as dist

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    found = []
    for device in getattr(pg, "_device_types", ()):
        try:
            found.append(pg._get_backend(device).options._timeout.total_seconds())
        except (AttributeError, RuntimeError):  # no such backend here, or no options
            continue
    return min(found) if found else None


def group_name(group: Any = None) -> str:
    """The name c10d gave ``group`` (``None``: the default group), the same on its every member.

    c10d prefixes the group's rendezvous keys with it, so its members agree on it; two groups
    of the same ranks have different names.
    """
    import torch.distributed as dist

    c10d = dist.distributed_c10d
    pg = group if group is not None else c10d._get_default_group()
    return str(c10d._get_process_group_name(pg))


def digest62(*parts: bytes | memoryview | np.ndarray) -> int:
    """A 62-bit digest of ``parts`` (a word :class:`Comm` can reduce), length-prefixed."""
    hasher = hashlib.blake2b(digest_size=8, person=b"hwrng-words")
    for part in parts:
        if isinstance(part, np.ndarray):  # as bytes; an empty one (a shard of no elements) too
            view = np.ascontiguousarray(part).reshape(-1).view(np.uint8).data
        else:
            view = memoryview(part).cast("B")
        hasher.update(len(view).to_bytes(8, "little"))
        hasher.update(view)
    return int.from_bytes(hasher.digest(), "little") % WORD_LIMIT


def digest_of(*values: object) -> int:
    """A 62-bit digest of plain values (numbers, strings, tuples of them), by their ``repr``."""
    return digest62(repr(values).encode())


def _device_for(group: Any, platform: Platform | None) -> torch.device:
    """Where a group's collectives run: the CPU where its backend takes CPU tensors."""
    import torch.distributed as dist

    backend = str(dist.get_backend(group))
    if any(name in backend for name in _CPU_BACKENDS):
        return torch.device("cpu")
    if platform is None:
        from hwrng._registry import platform_in_force

        platform = platform_in_force(None)
    return platform.device()


def _options(name: str) -> Any:
    """A c10d options class ``torch.distributed`` does not export (``AllgatherOptions``)."""
    import torch.distributed as dist
    from torch._C import _distributed_c10d

    return (getattr(dist, name, None) or getattr(_distributed_c10d, name))()


class Comm:
    """The collectives hwrng uses, over one process group.

    Parameters
    ----------
    group
        The process group; ``None`` for the whole world.
    platform
        Whose device carries the words on a backend without CPU tensors
        (nccl, hccl); by default the platform in force (the seed plan's, else
        :func:`hwrng.get_platform`'s choice).
    timeout
        Seconds each collective may take before it raises
        :class:`~hwrng.DistributedError`; ``None``: the group's own timeout.
    """

    def __init__(
        self, group: Any = None, platform: Platform | None = None, timeout: float | None = None
    ) -> None:
        self.group = group
        self.timeout = timeout
        if not distributed():
            self.rank, self.size, self.device = 0, 1, torch.device("cpu")
            return
        import torch.distributed as dist

        self.rank = int(dist.get_rank(group))
        self.size = int(dist.get_world_size(group))
        if self.rank < 0:
            raise DistributedError(
                f"this rank ({dist.get_rank()}) is not a member of the group it communicates over"
            )
        self.device = _device_for(group, platform)

    def global_rank(self, position: int) -> int:
        """The global rank at group position ``position``."""
        if self.group is None or not distributed():
            return position
        import torch.distributed as dist

        return int(dist.get_global_rank(self.group, position))

    def global_ranks(self) -> list[int]:
        """The global ranks of the group, in group order (``size`` of them)."""
        if not distributed():
            return [0]
        import torch.distributed as dist

        if self.group is None:
            return list(range(self.size))
        return [int(r) for r in dist.get_process_group_ranks(self.group)]

    def _words(self, values: Iterable[int]) -> torch.Tensor:
        words = [int(v) for v in values]
        for word in words:
            if not 0 <= word < WORD_LIMIT:
                raise ValueError(f"a collective word must lie in [0, 2**62), got {word}")
        return torch.tensor(words, dtype=torch.int64, device=self.device)

    def max(self, values: Sequence[int], *, negated: Sequence[int] = ()) -> list[int]:
        """Element-wise maxima of ``values`` over the group, then minima of ``negated``.

        One ``all_reduce`` of ``len(values) + len(negated)`` words.
        """
        import torch.distributed as dist

        words = self._words(values)
        flipped = -self._words(negated)
        payload = torch.cat([words, flipped])
        if self.size > 1 and payload.numel():
            self._all_reduce(payload, dist.ReduceOp.MAX)
        result = payload.cpu().tolist()
        return result[: len(values)] + [-w for w in result[len(values) :]]

    def sum(self, values: Sequence[int]) -> list[int]:
        """Element-wise sums of ``values`` over the group (one ``all_reduce``)."""
        import torch.distributed as dist

        payload = self._words(values)
        if self.size > 1 and payload.numel():
            self._all_reduce(payload, dist.ReduceOp.SUM)
        return [int(w) for w in payload.cpu().tolist()]

    def broadcast_text(self, text: str, src: int) -> str:
        """``text`` of the rank at group position ``src``, on every rank (cut to fit).

        One ``broadcast`` of :data:`MESSAGE_BYTES` bytes; only ``src``'s ``text``
        matters. Used on paths that already failed, to say why.
        """
        import torch.distributed as dist

        data = text.encode("utf-8")[:MESSAGE_BYTES]
        if self.size == 1:
            return data.decode("utf-8", errors="replace")
        buffer = np.zeros(MESSAGE_BYTES, dtype=np.uint8)
        if self.rank == src:
            buffer[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        payload = torch.from_numpy(buffer).to(self.device)
        if self.timeout is None:
            source = src if self.group is None else dist.get_global_rank(self.group, src)
            dist.broadcast(payload, src=source, group=self.group)
        else:
            options = dist.BroadcastOptions()
            options.rootRank, options.rootTensor = src, 0
            self._bounded("broadcast", options, lambda g, o: g.broadcast([payload], o))
        raw = payload.cpu().numpy().tobytes().rstrip(b"\0")
        return raw.decode("utf-8", errors="replace")

    def gather_rows(self, row: Sequence[int]) -> list[list[int]]:
        """Every member's ``row`` (all of one length), in group order: one ``all_gather``.

        Its cost grows with the group's size: callers gather within one mesh
        dim's group, or over the whole group only where no mesh is known.
        """
        import torch.distributed as dist

        payload = self._words(row)
        if self.size == 1:
            return [payload.cpu().tolist()]
        gathered = [torch.empty_like(payload) for _ in range(self.size)]
        if self.timeout is None:
            dist.all_gather(gathered, payload, group=self.group)
        else:
            options = _options("AllgatherOptions")
            self._bounded("all_gather", options, lambda g, o: g.allgather([gathered], [payload], o))
        return [[int(w) for w in g.cpu().tolist()] for g in gathered]

    def exchange(self, outgoing: Sequence[Sequence[int]]) -> list[list[int]]:
        """Send ``outgoing[p]`` to group position ``p``; return what each position sent here.

        Two ``all_to_all`` calls: one word per member (how many words it is
        sent), then the words themselves. The first grows with the group's
        size (callers exchange within one mesh dim's group); the second carries
        only what is sent.

        Parameters
        ----------
        outgoing
            One list of words per group position (this rank's own included).

        Returns
        -------
        list of list of int
            The words each group position sent to this rank, in group order.
        """
        if len(outgoing) != self.size:
            raise ValueError(
                f"exchange needs one list per member ({self.size}), got {len(outgoing)}"
            )
        if self.size == 1:
            return [[int(w) for w in outgoing[0]]]
        sent = [len(words) for words in outgoing]
        counts = torch.tensor(sent, dtype=torch.int64, device=self.device)
        incoming = torch.empty_like(counts)
        self._all_to_all(incoming, counts, None, None)
        received_counts = [int(n) for n in incoming.cpu().tolist()]
        payload = self._words(w for words in outgoing for w in words)
        received = torch.empty(sum(received_counts), dtype=torch.int64, device=self.device)
        self._all_to_all(received, payload, received_counts, sent)
        words = [int(w) for w in received.cpu().tolist()]
        result, start = [], 0
        for count in received_counts:
            result.append(words[start : start + count])
            start += count
        return result

    # -- each collective, bounded by the timeout when one is set ---------------------------

    def _all_reduce(self, payload: torch.Tensor, op: Any) -> None:
        import torch.distributed as dist

        if self.timeout is None:
            dist.all_reduce(payload, op=op, group=self.group)
            return
        options = dist.AllreduceOptions()
        options.reduceOp = op
        self._bounded("all_reduce", options, lambda g, o: g.allreduce([payload], o))

    def _all_to_all(
        self,
        output: torch.Tensor,
        payload: torch.Tensor,
        output_sizes: list[int] | None,
        input_sizes: list[int] | None,
    ) -> None:
        import torch.distributed as dist

        if self.timeout is None:
            dist.all_to_all_single(
                output,
                payload,
                output_split_sizes=output_sizes,
                input_split_sizes=input_sizes,
                group=self.group,
            )
            return
        options = dist.AllToAllOptions()
        self._bounded(
            "all_to_all",
            options,
            lambda g, o: g.alltoall_base(output, payload, output_sizes or [], input_sizes or [], o),
        )

    def _bounded(self, name: str, options: Any, issue: Any) -> None:
        """Issue one collective on the group with ``options.timeout`` set, and wait for it."""
        import datetime

        import torch.distributed as dist

        assert self.timeout is not None
        options.timeout = datetime.timedelta(seconds=self.timeout)
        group = self.group if self.group is not None else dist.group.WORLD
        try:
            issue(group, options).wait()
        except RuntimeError as error:  # the transport's timeout, or a peer that went away
            raise DistributedError(
                f"a collective ({name}) over {self.size} rank(s) did not complete within "
                f"{self.timeout:g} s: a rank stopped or died inside it, or its connection "
                f"failed ({type(error).__name__}: {str(error).strip()[:300]})"
            ) from error

    def first_ranks(self, flagged: bool, limit: int) -> list[int]:
        """The lowest ``limit`` group positions whose ``flagged`` is true, on every rank.

        At most ``limit + 1`` reductions of one word each; for failure paths.
        """
        found: list[int] = []
        last = -1
        while len(found) < limit:
            mine = self.rank if flagged and self.rank > last else self.size
            (lowest,) = self.max([], negated=[mine])
            if lowest >= self.size:
                break
            found.append(lowest)
            last = lowest
        return found

    def collect_texts(self, text: str | None, limit: int) -> list[tuple[int, str]]:
        """``(group position, text)`` of the lowest ``limit`` ranks that have a text.

        The same list on every rank; one reduction and one broadcast per text.
        """
        collected: list[tuple[int, str]] = []
        last = -1
        while len(collected) < limit:
            mine = self.rank if text is not None and self.rank > last else self.size
            (lowest,) = self.max([], negated=[mine])
            if lowest >= self.size:
                break
            collected.append((lowest, self.broadcast_text(text or "", lowest)))
            last = lowest
        return collected

    def odd_ones(self, value: int, limit: int) -> tuple[list[int], int]:
        """The group positions whose ``value`` differs from the one most ranks hold.

        Returns the lowest ``limit`` of them and how many there are; every
        position when no value is held by most ranks. Fixed-size collectives
        only: up to four candidate values -- each the value of the lowest
        rank holding none of the earlier ones -- are counted, and the one held
        by most ranks is the reference if no value left uncounted could match it.
        """
        candidates: list[int] = []
        counts: list[int] = []
        while len(candidates) < 4:
            mine = self.rank if value not in candidates else self.size
            (lowest,) = self.max([], negated=[mine])
            if lowest >= self.size:
                break
            (candidate,) = self.max([value if self.rank == lowest else 0])
            (count,) = self.sum([int(value == candidate)])
            candidates.append(candidate)
            counts.append(count)
        best = max(counts)
        winners = [c for c, n in zip(candidates, counts, strict=True) if n == best]
        unseen = self.size - sum(counts)
        odd = not (len(winners) == 1 and best > unseen and value == winners[0])
        (total,) = self.sum([int(odd)])
        return self.first_ranks(odd, limit), total
