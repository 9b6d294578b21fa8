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
import torch

from hwrng._collectives import digest62, digest_of
from hwrng._exceptions import InvalidArgumentError, MeshError
from hwrng._host import host_generator
from hwrng._mesh import MeshLayout, linear_index, mesh_tensor, require_known
from hwrng._plan import Seeding
from hwrng._platform import Platform
from hwrng._states import live_trackers
from hwrng.dtensor._meshes import meshes_in_use
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


def _tensor_digest(tensor: torch.Tensor) -> int:
    return digest62(tensor.detach().cpu().contiguous().numpy())


def _host_and_device(platform: Platform) -> list[tuple[str, int]]:
    found = [("torch.cpu", _tensor_digest(host_generator().get_state()))]
    if platform.uses_host_generator:
        return found
    for index in range(platform.device_count()):
        state = platform.generator(index).get_state()
        found.append((f"{platform.device_type}:{index}", _tensor_digest(state)))
    return found


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
            observation = Observation(
                _tensor_digest(state), None, replica if apart is None else apart
            )
            streams.append(Stream(name, (observation,)))
    return streams


def _dtensor(platform: Platform, seeding: Seeding | None, mesh: Any) -> Stream:
    """One observation per mesh of several ranks this rank ran DTensor random ops on.

    The ranks of a mesh must sit at the same offset; the seed each mesh draws
    with (from the plan) says which meshes must draw apart. A mesh of one rank
    has no peer to agree with: its draws are the rank's own, judged with its
    device's stream.
    """
    own_seed, offset = platform.counter.peek(platform.generator())
    meshes = [mesh] if mesh is not None else meshes_in_use()
    observations = []
    for used in meshes:
        ranks = mesh_tensor(used)
        if len(ranks) < 2:
            continue
        if seeding is None:  # seeded by other means: each mesh's ranks should still agree
            seed_key, drawn = 0, own_seed
        else:
            seed = seeding.dtensor_seed(used)
            seed_key = digest_of(seed)
            # on the plan's stream, ops draw with the mesh's seed; re-seeded, with the rank's own
            drawn = seed if own_seed == seeding.rank_seed else own_seed
        digest = digest_of(drawn, offset)
        observations.append(Observation(digest, digest62(ranks, repr(seed_key).encode()), seed_key))
    return Stream(DTENSOR_STREAM, tuple(observations))


def rank_streams(
    platform: Platform, plan: Seeding | None, seeding: Seeding | None, replica: int, mesh: Any
) -> list[Stream]:
    """Every stream this rank holds, observed (nothing is drawn or changed).

    ``plan`` is the plan in force (the DTensor stream's seeds come from it);
    ``seeding`` the plan the keys come from (``None`` where ``sharded_dims``
    give them), which may say what named states differ along.
    """
    both_ways = [
        Stream(name, (Observation(digest, replica, replica),))
        for name, digest in [*_host_and_device(platform), *_libraries()]
    ]
    return [*both_ways, *_named(seeding, replica), _dtensor(platform, plan, mesh)]


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
