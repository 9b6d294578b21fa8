"""What every integration shares: seeding and verifying a trainer's ranks, and the loaders."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Union

from hwrng._collectives import rank_and_size
from hwrng._exceptions import CheckpointError
from hwrng._platform import Platform
from hwrng._registry import platform_in_force
from hwrng._seeding import manual_seed
from hwrng.verify import verify

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

__all__ = ["MeshLike", "check_world", "refuse_persistent_workers", "seed_world"]

# A mesh, or a function that builds one once torch.distributed is up (the trainer starts it).
MeshLike = Union["DeviceMesh", Callable[[], "DeviceMesh"], None]


def seed_world(
    seed: int,
    mesh: MeshLike,
    sharded_dims: Sequence[str] | None,
    platform: Platform | str | None,
) -> DeviceMesh | None:
    """Seed this rank with :func:`hwrng.manual_seed` and return the mesh it was seeded for.

    ``mesh=None`` in a distributed job means data parallelism: a 1-D mesh
    ``("dp",)`` over the world, every rank its own seed (``sharded_dims``
    defaults to every dim of the mesh). A single process is seeded alone.
    """
    _, world_size = rank_and_size()
    resolved = platform_in_force(platform)
    built = mesh() if callable(mesh) else mesh
    if built is None and world_size > 1:
        from torch.distributed.device_mesh import init_device_mesh

        built = init_device_mesh(resolved.device_type, (world_size,), mesh_dim_names=("dp",))
    if built is None:
        manual_seed(seed, platform=resolved)
        return None
    dims = sharded_dims if sharded_dims is not None else tuple(built.mesh_dim_names or ())
    manual_seed(seed, built, sharded_dims=dims, platform=resolved)
    return built


def check_world(mesh: DeviceMesh | None) -> None:
    """Run :func:`hwrng.verify` over the job (a collective) and raise if any stream is wrong."""
    _, world_size = rank_and_size()
    if world_size > 1:
        verify(mesh).raise_if_failed()


def refuse_persistent_workers(loaders: Iterable[Any], where: str) -> None:
    """Refuse to restore RNG streams under a loader whose workers persist across epochs.

    With ``persistent_workers=True`` a DataLoader seeds its workers once, when
    its first iterator is made, and they go on drawing from those streams
    epoch after epoch; the epochs' iterators draw no seed. A resumed job's
    workers are new: seeded when the resumed loader first iterates, and at the
    start of their streams, where the uninterrupted run's workers were far
    along theirs. No restore of the ranks' streams can give them back, so the
    augmentation would differ -- silently. Every rank holds the same loaders,
    so every rank refuses alike.

    Raises
    ------
    CheckpointError
        Naming the loader and the fix.
    """
    for loader in loaders:
        if getattr(loader, "persistent_workers", False) and getattr(loader, "num_workers", 0) > 0:
            raise CheckpointError(
                f"{where}: refusing to restore the RNG streams under a DataLoader with "
                f"persistent_workers=True ({loader.num_workers} workers): its workers keep the "
                "random streams they were seeded with at the first epoch, which a resumed job "
                "cannot give back, so its augmentation would differ from the uninterrupted "
                "run's. Use persistent_workers=False, or seed each sample's augmentation "
                "from its index and epoch"
            )
