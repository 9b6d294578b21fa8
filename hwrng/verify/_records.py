"""What ranks send one another while judging: tallies for the verdict, holdings for naming.

Every record travels towards the rank that *owns* its routing key (see
``_routing``) and merges on the way with records of the same identity, so a
rank never holds more records than there are distinct keys among what it
was sent:

* a :class:`Tally` (the verdict round) summarises, for one check and one key,
  the lowest and highest value seen and how many ranks were merged: an
  *agree* tally (keyed by an agree key) spans the digests of the ranks that
  must agree, an *apart* tally (keyed by a digest) spans the apart keys of
  the ranks that drew it. Two values where one was expected is a violation,
  whatever else is merged in later: a tally's size never grows;
* a :class:`Holding` (the naming round, only after a failure) keeps one
  (agree key, digest, apart key) of one check exactly, with how many ranks
  hold it and the lowest of them, so an owner can tell the majority of an
  agree group and name the ranks of every violation.

Records are encoded as words below ``2**62`` for :meth:`hwrng._collectives.Comm.exchange`.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Holding", "Role", "Tally", "decode", "encode", "merge_holdings", "merge_tallies"]


class Role(enum.IntEnum):
    """What a record is about, and so which of its keys routes it."""

    #: Ranks with one agree key, routed by that key.
    AGREE = 0
    #: Ranks that drew one digest, routed by the digest.
    APART = 1


_TALLY, _HOLDING = 0, 1


@dataclass(frozen=True)
class Tally:
    """The verdict round's summary of one key of one check.

    Attributes
    ----------
    role
        ``AGREE``: ``key`` is an agree key and ``low``/``high`` span the digests of
        its ranks. ``APART``: ``key`` is a digest and ``low``/``high`` span the
        apart keys of the ranks that drew it.
    check
        The check's index.
    key
        The routing key.
    low, high
        The smallest and largest value merged.
    count
        How many ranks were merged.
    """

    role: Role
    check: int
    key: int
    low: int
    high: int
    count: int = 1

    @property
    def routing_key(self) -> int:
        """The key whose owner judges this tally."""
        return self.key

    @property
    def split(self) -> bool:
        """Two values were merged where one was required."""
        return self.low != self.high


@dataclass(frozen=True)
class Holding:
    """The naming round's exact record: how many ranks hold one observation, and the lowest.

    Attributes
    ----------
    role
        ``AGREE`` (routed by ``agree``) or ``APART`` (routed by ``digest``).
    check
        The check's index.
    agree
        The agree key (0 for ``APART`` holdings).
    digest, apart, empty
        The observation's digest, apart key and whether its draw was empty.
    count
        How many ranks hold it.
    ranks
        The lowest of those ranks, sorted (at most the round's limit).
    """

    role: Role
    check: int
    agree: int
    digest: int
    apart: int
    empty: bool
    count: int
    ranks: tuple[int, ...]

    @property
    def routing_key(self) -> int:
        """The key whose owner judges this holding."""
        return self.agree if self.role is Role.AGREE else self.digest

    @property
    def identity(self) -> tuple[int, int, int, int, int, bool]:
        """What two holdings must share to merge."""
        return (self.role, self.check, self.agree, self.digest, self.apart, self.empty)


def lowest(groups: Iterable[Sequence[int]], limit: int) -> tuple[int, ...]:
    """The ``limit`` lowest ranks of several sorted, disjoint rank lists, sorted."""
    merged = heapq.merge(*groups)
    found: list[int] = []
    for rank in merged:
        if len(found) == limit:
            break
        found.append(rank)
    return tuple(found)


def merge_tallies(tallies: Iterable[Tally]) -> list[Tally]:
    """Merge tallies of one role, check and key into one (ordered by that identity)."""
    merged: dict[tuple[int, int, int], Tally] = {}
    for tally in tallies:
        identity = (tally.role, tally.check, tally.key)
        seen = merged.get(identity)
        if seen is None:
            merged[identity] = tally
        else:
            merged[identity] = Tally(
                tally.role,
                tally.check,
                tally.key,
                min(seen.low, tally.low),
                max(seen.high, tally.high),
                seen.count + tally.count,
            )
    return [merged[identity] for identity in sorted(merged)]


def merge_holdings(holdings: Iterable[Holding], limit: int) -> list[Holding]:
    """Merge holdings of one identity, keeping the ``limit`` lowest ranks (ordered by identity)."""
    groups: dict[tuple[int, int, int, int, int, bool], list[Holding]] = {}
    for holding in holdings:
        groups.setdefault(holding.identity, []).append(holding)
    merged = []
    for identity in sorted(groups):
        same = groups[identity]
        first = same[0]
        merged.append(
            Holding(
                first.role,
                first.check,
                first.agree,
                first.digest,
                first.apart,
                first.empty,
                sum(h.count for h in same),
                lowest((h.ranks for h in same), limit),
            )
        )
    return merged


def encode(records: Iterable[Tally | Holding]) -> list[int]:
    """The words of ``records``, one after another (each says its own length)."""
    words: list[int] = []
    for record in records:
        if isinstance(record, Tally):
            words += [
                _TALLY,
                record.role,
                record.check,
                record.key,
                record.low,
                record.high,
                record.count,
            ]
        else:
            words += [
                _HOLDING,
                record.role,
                record.check,
                record.agree,
                record.digest,
                record.apart,
                int(record.empty),
                record.count,
                len(record.ranks),
                *record.ranks,
            ]
    return words


def decode(words: Sequence[int]) -> list[Tally | Holding]:
    """The records :func:`encode` wrote into ``words``."""
    records: list[Tally | Holding] = []
    at = 0
    while at < len(words):
        if words[at] == _TALLY:
            _, role, check, key, low, high, count = words[at : at + 7]
            records.append(Tally(Role(role), check, key, low, high, count))
            at += 7
        elif words[at] == _HOLDING:
            _, role, check, agree, digest, apart, empty, count, length = words[at : at + 9]
            ranks = tuple(words[at + 9 : at + 9 + length])
            records.append(
                Holding(Role(role), check, agree, digest, apart, bool(empty), count, ranks)
            )
            at += 9 + length
        else:
            raise ValueError(f"not a record at word {at}: {words[at]}")
    return records
