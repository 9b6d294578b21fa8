"""What one rank observes of each RNG stream it holds, and the keys its plan gives them.

Each stream is digested without drawing from it or changing it. The keys
come from the seed plan (or from ``mesh=`` and ``sharded_dims=``): ranks with
the same *replica key* (``rank_seed - seed``, or the linear index over the
sharded dims) must agree, ranks with different ones must differ.

* torch's CPU generator, each device's, ``random`` and NumPy: replicas agree,
  shards differ;
* a named state of a live :class:`~hwrng.RNGStatesTracker`: shards differ
  (it may differ between replicas: Megatron's tensor-parallel stream does),
  or, after a preset that says so, ranks differ along the dims it names;
* the DTensor stream: one observation per mesh (of more than one rank) this
  rank ran DTensor random ops on -- the ranks that share a mesh must sit at
  the same position of it, whatever other meshes each of them used, and
  meshes whose seeds differ must draw apart.

A stream a rank lacks (a named state only one pipeline stage holds, a mesh
only some ranks use) is judged among the ranks that have it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hwrng._collectives import digest62, digest_of, rank_and_size
from hwrng._exceptions import InvalidArgumentError, MeshError
from hwrng._host import host_generator
from hwrng._mesh import MeshLayout, linear_index, mesh_tensor, require_known
from hwrng._plan import Seeding
from hwrng._platform import Platform
from hwrng._state_digest import mersenne_state_digest
from hwrng._states import live_trackers
from hwrng.verify._meshes import IRREGULAR, instance_of, kind_of, rank_set
from hwrng.verify._rule import Observation

__all__ = [
    "BOTH_WAYS",
    "DTENSOR",
    "SHARDS_DIFFER",
    "STATE_PREFIX",
    "Keys",
    "Stream",
    "check_stream_names",
    "expectation_of",
    "keys_for",
    "order",
    "rank_streams",
]

#: How each kind of stream is expected to relate across ranks.
BOTH_WAYS = "replicas agree, shards differ"
SHARDS_DIFFER = "shards differ"
DTENSOR = "each DTensor mesh agrees, meshes differ"

DTENSOR_STREAM = "dtensor"
STATE_PREFIX = "state:"


@dataclass(frozen=True)
class Stream:
    """One stream this rank holds: its name and this rank's observations of it."""

    name: str
    observations: tuple[Observation, ...]


def expectation_of(name: str) -> str:
    """The relation a stream of this name is judged by (the same on every rank)."""
    if name == DTENSOR_STREAM:
        return DTENSOR
    if name.startswith(STATE_PREFIX):
        return SHARDS_DIFFER
    return BOTH_WAYS


def order(name: str) -> tuple[int, int, str]:
    """The report's order: torch CPU, devices by index, random, NumPy, named states, DTensor."""
    fixed = {"torch.cpu": 0, "random": 2, "numpy": 3, DTENSOR_STREAM: 5}
    if name in fixed:
        return fixed[name], 0, name
    if name.startswith(STATE_PREFIX):
        return 4, 0, name
    device, _, index = name.rpartition(":")
    return 1, int(index) if index.isdigit() else 0, device


@dataclass(frozen=True)
class Keys:
    """What the plan (or ``sharded_dims``) says about this rank.

    Attributes
    ----------
    replica
        The replica key: equal on ranks that should draw alike.
    plan
        A digest of the plan every rank must share.
    words
        The plan, in words.
    layout
        The mesh ranks are named by, when known.
    """

    replica: int
    plan: int
    words: str
    layout: MeshLayout | None


def keys_for(seeding: Seeding | None, mesh: Any, sharded_dims: Sequence[str] | None) -> Keys:
    """The keys of this rank, from ``sharded_dims`` over ``mesh`` or from the plan."""
    if sharded_dims is not None:
        layout = MeshLayout.of(mesh)
        require_known(sharded_dims, layout.names)
        coordinate = mesh.get_coordinate()
        if coordinate is None:
            raise MeshError("this rank is not part of the mesh given to verify")
        sizes = dict(zip(layout.names, layout.shape, strict=True))
        position = dict(zip(layout.names, coordinate, strict=True))
        key = linear_index([position[d] for d in sharded_dims], [sizes[d] for d in sharded_dims])
        words = f"sharded {', '.join(sharded_dims) or 'along no dim'} over {layout.describe()}"
        shape = (layout.names, layout.shape, tuple(sharded_dims))  # each stage has its own ranks
        return Keys(digest_of(key), digest_of(shape), words, layout)
    if seeding is None:
        raise MeshError(
            "no seed plan is in force (seeded by other means than hwrng.manual_seed or a "
            "preset): pass mesh= and sharded_dims= to say which ranks should be replicas"
        )
    plan_layout = seeding.layout
    identity = (
        seeding.seed,
        [(d.name, d.weight, d.size) for d in seeding.dims],
        seeding.source,
        seeding.platform,
        None if plan_layout is None else (plan_layout.names, plan_layout.shape),
        seeding.generation,
        seeding.named,
    )
    known = plan_layout if mesh is None else MeshLayout.of(mesh)
    # by coordinates, not by seed: ranks a trainer's formula gives one seed by accident
    # (Megatron-LM's 100*pp + 10*dp) are not replicas, and drawing alike fails them
    replica = [(d.name, d.coordinate) for d in seeding.dims if d.weight]
    return Keys(digest_of(replica), digest_of(identity), seeding.describe(), known)


def _draws(digest: bytes) -> int:
    """A state digest (what the state will draw) as a word to compare."""
    return digest62(digest)


def _host_and_device(platform: Platform) -> list[tuple[str, int, bool]]:
    """``(name, digest, whether it is a device's default generator)`` of each generator."""
    # torch's CPU generator: what it draws (its Mersenne state), not the 64-bit seed it
    # stores, whose high 32 bits torch's own seeding ignores
    host = mersenne_state_digest(host_generator().get_state())
    found = [("torch.cpu", _draws(host), platform.uses_host_generator)]
    if platform.uses_host_generator:
        return found
    for index in range(platform.device_count()):
        state = platform.generator(index).get_state()
        digest = _draws(platform.state_digest(state))
        found.append((f"{platform.device_type}:{index}", digest, True))
    return found


def _device_key(seeding: Seeding | None, replica: int) -> int:
    """The replica key of the devices' default generators.

    The plan's, unless a preset seeded them along other dims (slapo's
    ``always_enable_tp_seed``).
    """
    dims = seeding.device_dims() if seeding is not None else None
    if seeding is None or dims is None:
        return replica
    coordinates = {d.name: d.coordinate for d in seeding.dims}
    return digest_of([(d, coordinates.get(d)) for d in dims])


def _libraries() -> list[tuple[str, int]]:
    numpy_state: Any = np.random.get_state()
    return [
        ("random", digest_of(random.getstate())),
        (
            "numpy",
            digest62(np.ascontiguousarray(numpy_state[1]), repr(numpy_state[2:]).encode()),
        ),
    ]


def named_apart(name: str, seeding: Seeding | None) -> int | None:
    """A named state's apart key where its preset says which dims it differs along."""
    if seeding is None:
        return None
    dims = seeding.named_dims(name.removeprefix(STATE_PREFIX))
    if dims is None:
        return None
    coordinates = {d.name: d.coordinate for d in seeding.dims}
    return digest_of([(d, coordinates.get(d)) for d in dims])


def _named(seeding: Seeding | None, replica: int) -> list[Stream]:
    streams = []
    for tracker_name, tracker in live_trackers().items():
        for state_name, state in tracker.get_states().items():
            name = f"{STATE_PREFIX}{tracker_name}/{state_name}"
            apart = named_apart(name, seeding)
            digest = _draws(tracker.platform.state_digest(state))
            observation = Observation(digest, None, replica if apart is None else apart)
            streams.append(Stream(name, (observation,)))
    return streams


@dataclass(frozen=True)
class DTensorView:
    """A rank's DTensor stream: where its next op on each mesh draws, and the meshes it used.

    The ranks of a mesh must draw a replicated op alike, so they must sit at
    the same position of the same seed, whatever seed each of them derives
    from the plan; meshes whose seeds differ must draw apart. A mesh of one
    rank has no peer to agree with: its draws are the rank's own, judged with
    its device's stream. A rank that ran no op on a mesh some rank used (or
    re-seeded since) is observed all the same, where its next op there would
    draw (:meth:`missing`).

    Attributes
    ----------
    rank
        This process's global rank.
    seeding
        The plan in force (``None``: seeded by other means, each rank draws
        with its own seed).
    own_seed, offset
        Where the device's default generator sits.
    recorded
        The rank sets of the meshes (of two ranks or more) to observe: those
        DTensor ops ran on since the plan was made, or the ``mesh`` passed.
    kinds
        The kinds of those meshes (see ``_meshes``); empty with ``mesh`` given.
    """

    rank: int
    seeding: Seeding | None
    own_seed: int
    offset: int
    recorded: tuple[tuple[int, ...], ...]
    kinds: tuple[str, ...]

    def _seed_key(self, ranks: tuple[int, ...]) -> tuple[int, int]:
        """``(the seed key of the mesh, the seed its ops draw with)``."""
        plan = self.seeding
        if plan is None:  # seeded by other means: each mesh's ranks should still agree
            return 0, self.own_seed
        seed = plan.dtensor_seed_of(ranks)
        # on the plan's stream, ops draw with the mesh's seed; re-seeded, with the rank's own
        return digest_of(seed), seed if self.own_seed == plan.rank_seed else self.own_seed

    def observe(self, ranks: tuple[int, ...]) -> Observation:
        """What this rank's next op on the mesh over ``ranks`` (a rank set) draws."""
        seed_key, drawn = self._seed_key(ranks)
        return Observation(digest_of(drawn, self.offset), digest_of("mesh", ranks), seed_key)

    def seeds(self, ranks: tuple[int, ...]) -> Observation:
        """The seed this rank takes for the mesh: ranks of one mesh must take one."""
        seed_key, _ = self._seed_key(ranks)
        return Observation(seed_key, digest_of("mesh", ranks), 0)

    def missing(self, kinds: Iterable[str], members: Any) -> tuple[tuple[int, ...], ...]:
        """The meshes of ``kinds`` this rank belongs to and holds no record of.

        ``members`` holds the judged ranks: a mesh reaching beyond them is not
        one of this job's.
        """
        found = []
        for kind in kinds:
            if kind == IRREGULAR:
                continue
            ranks = instance_of(self.rank, kind)
            if ranks not in self.recorded and all(r in members for r in ranks):
                found.append(ranks)
        return tuple(sorted(set(found)))


def dtensor_view(platform: Platform, seeding: Seeding | None, mesh: Any) -> DTensorView:
    """The :class:`DTensorView` of this rank (nothing is drawn or changed)."""
    # Imported here: the adapter's package stays unloaded until verify runs (import hwrng).
    from hwrng.dtensor._meshes import meshes_in_use

    own_seed, offset = platform.counter.peek(platform.generator())
    meshes = [mesh] if mesh is not None else meshes_in_use()
    recorded = sorted({rank_set(mesh_tensor(used).tolist()) for used in meshes})
    recorded = [ranks for ranks in recorded if len(ranks) > 1]
    kinds = () if mesh is not None else tuple(sorted({kind_of(r) for r in recorded}))
    rank = rank_and_size()[0]
    return DTensorView(rank, seeding, own_seed, offset, tuple(recorded), kinds)


def rank_streams(
    platform: Platform, plan: Seeding | None, seeding: Seeding | None, replica: int, mesh: Any
) -> tuple[list[Stream], DTensorView]:
    """Every stream this rank holds, observed (nothing is drawn or changed), and its DTensor view.

    ``plan`` is the plan in force (the DTensor stream's seeds come from it);
    ``seeding`` the plan the keys come from (``None`` where ``sharded_dims``
    give them), which may say what named states differ along.
    """
    device = _device_key(seeding, replica)
    generators = [
        Stream(name, (Observation(digest, key, key),))
        for name, digest, on_device in _host_and_device(platform)
        for key in [device if on_device else replica]
    ]
    libraries = [
        Stream(name, (Observation(digest, replica, replica),)) for name, digest in _libraries()
    ]
    view = dtensor_view(platform, plan, mesh)
    dtensor = Stream(DTENSOR_STREAM, tuple(view.observe(r) for r in view.recorded))
    return [*generators, *libraries, *_named(seeding, replica), dtensor], view


def check_stream_names(chosen: Iterable[str] | None) -> list[str] | None:
    """The stream names asked for, checked alike on every rank (before any collective)."""
    if chosen is None:
        return None
    if isinstance(chosen, (str, bytes)) or not isinstance(chosen, Iterable):
        raise InvalidArgumentError(f"streams must be a list of names, not {chosen!r}")
    wanted = list(chosen)
    odd = [name for name in wanted if not isinstance(name, str)]
    if odd:
        raise InvalidArgumentError(f"stream names must be strings, got {odd!r}")
    if len(set(wanted)) != len(wanted):
        raise InvalidArgumentError(f"streams names a stream twice: {wanted!r}")
    return wanted
