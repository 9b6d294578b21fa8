"""``hwrng.verify``: replicas agree and shards differ, judged for every pair of ranks.

The family's modules, each importing only those above it in this list:

* ``_records``: what ranks send one another while judging (tallies for the
  verdict, holdings for naming), merged on the way and encoded as words;
* ``_rule``: the one rule -- :class:`Observation`, and how an owner judges
  the holdings of one key;
* ``_wire``: the collectives the judging algorithm asks for, and the driver
  that answers them with ``torch.distributed``;
* ``_routing``: where a record goes -- to the rank owning its key, one mesh
  dim at a time;
* ``_judging``: the algorithm (a generator of requests): where checks vary,
  the verdict, the naming round;
* ``_simulator``: every rank of a simulated world judged in one process, with
  real values (what the property tests check against a brute-force oracle);
* ``_topology``: the judged ranks as a grid of a DeviceMesh's dims, or one group;
* ``_streams``: what a rank observes of each RNG stream, and its keys;
* ``_setup``: arguments, and what every rank must hold alike before judging;
* ``_report``: :class:`~hwrng.VerifyReport` and :class:`~hwrng.StreamVerdict`;
* ``_api``: :func:`hwrng.verify` itself.

``hwrng.verify`` (the attribute of ``hwrng``) is the function; this package
holds it, and ``from hwrng.verify import VerifyReport`` works as well.
"""

from __future__ import annotations

from hwrng.verify._api import verify
from hwrng.verify._report import StreamVerdict, VerifyReport

__all__ = ["StreamVerdict", "VerifyReport", "verify"]
