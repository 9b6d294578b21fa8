"""Checkpoint and resume: every RNG stream of every rank saved, checked, and given back bit for bit.

The family, every name of which is also importable from :mod:`hwrng`:

- :func:`state_dict` / :func:`load_state_dict`: this rank's complete RNG
  state as plain values and tensors, and its checked restore;
- :func:`save` / :func:`load`: the same to a file of this rank, sealed and
  written atomically;
- :class:`RNGState`: every rank's state in a DCP checkpoint, or beside a
  checkpoint that one rank writes, with one verdict on every rank;
- :class:`RNGLoadPlanner` / :class:`RNGSavePlanner`: DCP planners for per-rank
  entries (imported when first used: they import ``torch.distributed.checkpoint``);
- :data:`OnMismatch`: what a load does with a state written elsewhere.

One module per job: ``_capture`` takes a state, ``_checks`` checks one before
anything changes, ``_restore`` gives it back, ``_reseed`` re-derives streams
across a change of world, ``_files`` seals and writes files atomically,
``_per_rank`` is :func:`save`/:func:`load` (one file per rank, one save
across ranks), ``_plan_vote`` agrees on the one saved plan a per-rank load
re-derives from, ``_storage`` reaches a checkpoint's filesystem (a path, or an
fsspec URL), ``_sets`` keeps each save's per-rank files apart, ``_named``
finds which saves a trainer's file names, ``_commit`` decides which sets a
commit removes, ``_job`` is the entry all ranks share, ``_dcp`` is
:class:`RNGState`, ``_planners`` the DCP planners.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hwrng.checkpoint._capture import state_dict
from hwrng.checkpoint._checks import OnMismatch
from hwrng.checkpoint._dcp import RNGState
from hwrng.checkpoint._per_rank import load, save
from hwrng.checkpoint._restore import load_state_dict

if TYPE_CHECKING:
    from hwrng.checkpoint._planners import RNGLoadPlanner, RNGSavePlanner

__all__ = [
    "OnMismatch",
    "RNGLoadPlanner",
    "RNGSavePlanner",
    "RNGState",
    "load",
    "load_state_dict",
    "save",
    "state_dict",
]

_PLANNERS = ("RNGLoadPlanner", "RNGSavePlanner")


def __getattr__(name: str) -> object:
    if name in _PLANNERS:
        from hwrng.checkpoint import _planners

        return getattr(_planners, name)
    raise AttributeError(f"module 'hwrng.checkpoint' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PLANNERS))
