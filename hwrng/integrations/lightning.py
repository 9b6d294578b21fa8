"""hwrng in PyTorch Lightning: a Trainer callback, and the same state for Fabric.

Lightning alone: ``seed_everything`` seeds every rank alike (data-parallel
ranks draw the same dropout masks unless you add the rank yourself), and
neither the Trainer's nor Fabric's checkpoints hold any RNG state, so a resumed
run draws other masks and augmentations than the uninterrupted one (measured in
tests/integrations/test_integration_lightning.py).

Trainer::

    trainer = L.Trainer(callbacks=[HwrngCallback(seed=1234)], ...)

Fabric::

    fabric.launch()
    seed_fabric(1234)
    state = {"model": model, "optimizer": optimizer, "rng": fabric_rng_state(path)}
    save_fabric(fabric, path, state)  # later, in fresh processes: load_fabric(fabric, path, state)

Lightning writes its checkpoint from rank 0 alone; each rank's own RNG entry
goes into a folder beside it, ``<checkpoint>.hwrng/save-<nonce>/rank-<r>.pt``,
written by that rank, a new set per save (the checkpoint holds the small entry
every rank shares, which names its set), on the checkpoint's own filesystem
(a local path, or an fsspec URL). After each save the sets no file in the
folder names go -- the files are read then, so a save that fails or is cut
short, or whose write is still on its way (``AsyncCheckpointIO``), leaves the
previous checkpoint whole, and a copy of a checkpoint (``cp epoch=3.ckpt
best.ckpt``) keeps its set when Lightning removes the original.

Requires ``pip install "hwrng[lightning]"``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.utilities.data import _set_sampler_epoch

from hwrng._exceptions import HwrngWarning
from hwrng._platform import Platform
from hwrng.checkpoint import OnMismatch, RNGState
from hwrng.checkpoint._commit import release
from hwrng.checkpoint._storage import is_url, storage_for
from hwrng.integrations._world import (
    MeshLike,
    check_world,
    refuse_persistent_workers,
    seed_world,
)

__all__ = [
    "HwrngCallback",
    "fabric_rng_state",
    "load_fabric",
    "rank_folder",
    "save_fabric",
    "seed_fabric",
]


def rank_folder(checkpoint: str | os.PathLike[str]) -> str:
    """Where each rank's own entry of ``checkpoint`` goes: ``<checkpoint>.hwrng``.

    On the checkpoint's own filesystem: a local path, or an fsspec URL as
    Lightning's ``dirpath`` may be (``s3://...``, ``simplecache::file://...``).
    """
    return os.fspath(checkpoint).rstrip("/") + ".hwrng"


def _is_file(path: str | os.PathLike[str]) -> bool | None:
    """Whether ``path`` is a regular file (links followed); ``None`` where that cannot be told."""
    try:
        storage, where = storage_for(path)
        return storage.kind(where) == "file"
    except Exception:  # no answer: nothing is let go
        return None


def _resolved(checkpoint: str | os.PathLike[str]) -> str:
    """A local checkpoint's path with its links followed (``save_last="link"``); a URL as is."""
    text = os.fspath(checkpoint)
    return text if is_url(text) else os.path.realpath(text)


class HwrngCallback(pl.Callback):
    """Seed each rank for its place in the mesh, verify, and checkpoint every rank's streams.

    - ``setup`` (every stage, once torch.distributed is up): :func:`hwrng.manual_seed`
      on ``mesh`` -- by default a 1-D ``("dp",)`` mesh over the world, each
      rank its own seed; with ``sharded_dims`` naming dims of your mesh,
      replicas along the others share one.
    - ``on_fit_start``: :func:`hwrng.verify` over every rank; raises
      :class:`~hwrng.VerificationError` naming offenders (``verify=False`` skips it).
    - checkpoints: every checkpoint ``Trainer.save_checkpoint`` writes (those of
      ``ModelCheckpoint``, ``OnExceptionCheckpoint``, yours) gets each rank's
      own entry in ``<checkpoint>.hwrng/save-<nonce>/rank-<r>.pt``, written by
      that rank into a new set per save, and the small entry all ranks share
      (naming the set) in the checkpoint itself; after each save the sets no
      file in the folder names go (read then: an ``AsyncCheckpointIO``
      write still on its way keeps the previous set, and so does a copy such
      as ``best.ckpt``), and the folder goes when ``ModelCheckpoint`` removes
      the checkpoint, unless a file in the folder (a copy) still names a set
      of it. An fsspec ``dirpath``
      gets the folder on its filesystem; a copy of the folder made with its
      links followed (``cp -rL``) finds its sets.
      ``trainer.fit(ckpt_path=...)`` gives each rank its own streams back, bit
      for bit, or every rank refuses (another world size, backend, corrupt
      entry, a refusal on any one rank) before any rank changes anything.
    - a checkpoint written without this callback (or saved weights-only) is
      refused -- every stream would restart from its seed and repeat the
      saved job's draws -- unless ``on_mismatch="reseed"``, which starts new
      streams instead, with a warning.
    - a training DataLoader with ``persistent_workers=True`` is refused at a
      resume: its workers' streams cannot be given back.

    Parameters
    ----------
    seed
        The job's seed, the same on every rank.
    mesh
        A DeviceMesh, a function that builds one (called in ``setup``), or
        ``None`` for the data-parallel mesh above.
    sharded_dims
        Dims of the mesh along which ranks differ; by default all of them.
    verify
        Check the streams over every rank when fitting starts.
    on_mismatch, platform
        As for :func:`hwrng.load_state_dict`; ``on_mismatch="reseed"`` also
        re-derives the streams on another world size (4 ranks from 2, or one
        process from 2) and for a checkpoint without hwrng's entry.

    Notes
    -----
    Use ``DataLoader(worker_init_fn=hwrng.worker_init_fn)`` for augmentations
    in workers. Tested: checkpoints at epoch ends resume bit for bit. Resumed
    mid-epoch, the streams are restored, but Lightning serves a plain
    ``DataLoader``'s first batches of the epoch again, and the callback warns
    (exact data needs a stateful loader). Lightning hands no checkpoint hook
    the checkpoint's path: the callback wraps this trainer's
    ``save_checkpoint`` and its strategy's ``remove_checkpoint`` to learn it
    (Lightning 2.6.6, pinned).
    """

    def __init__(
        self,
        seed: int,
        *,
        mesh: MeshLike = None,
        sharded_dims: Sequence[str] | None = None,
        verify: bool = True,
        on_mismatch: OnMismatch = "error",
        platform: Platform | str | None = None,
    ) -> None:
        super().__init__()
        self.seed = seed
        self.mesh = mesh
        self.sharded_dims = sharded_dims
        self.verify = verify
        self.platform = platform
        self._state = RNGState(on_mismatch=on_mismatch, platform=platform)
        self._seeded_mesh: Any = None
        self._pending: Callable[[], None] | None = None
        self._loaded = False  # a checkpoint's callback states reached this callback

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Seed this rank (the checkpoint, if any, is restored after this)."""
        self._seeded_mesh = seed_world(self.seed, self.mesh, self.sharded_dims, self.platform)
        self._state.mesh = self._seeded_mesh
        self._loaded = False
        self._route_rank_files(trainer)

    def _route_rank_files(self, trainer: pl.Trainer) -> None:
        """Learn each checkpoint's path, on every rank, when it is written and removed.

        ``Trainer.save_checkpoint(filepath)`` runs on every rank (ModelCheckpoint,
        OnExceptionCheckpoint and Lightning's docs require it) and asks the
        callbacks for their state before anything is written;
        ``Strategy.remove_checkpoint`` runs on every rank and deletes on rank 0,
        which then, if the file was there and is gone, lets go the sets of its
        folder that no file beside it names (a copy keeps its set; a file that
        Lightning did not remove, renamed by the user, keeps everything).
        Both are wrapped on this trainer's instances, once.
        """
        if getattr(trainer, "_hwrng_routed", False):
            return
        state, strategy = self._state, trainer.strategy
        save, remove = trainer.save_checkpoint, strategy.remove_checkpoint

        def save_checkpoint(filepath: Any, *args: Any, **kwargs: Any) -> None:
            state.directory = rank_folder(filepath)
            try:
                # its barrier: rank 0 has written the file -- or, with AsyncCheckpointIO,
                # queued the write: the commit reads the file, and keeps every set it names
                save(filepath, *args, **kwargs)
                state.commit(os.fspath(filepath))
            finally:
                state.directory = None

        def remove_checkpoint(filepath: Any) -> None:
            # every rank wrote its file before the save's barrier: rank 0 acts for every rank
            there = strategy.is_global_zero and _is_file(filepath)
            remove(filepath)
            if there and _is_file(filepath) is False:  # Lightning removed the file itself
                release(rank_folder(filepath))

        trainer.save_checkpoint = save_checkpoint
        strategy.remove_checkpoint = remove_checkpoint
        trainer._hwrng_routed = True

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Find this checkpoint's rank folder, and notice a checkpoint without hwrng's entry.

        Lightning calls this on every rank with the whole checkpoint, and calls
        :meth:`load_state_dict` only when the checkpoint holds this callback's
        state: without one, the vote on "no entry" runs here (every rank reads
        the same file, so every rank votes alike).
        """
        self._loaded = True
        if trainer.ckpt_path:  # a link (ModelCheckpoint(save_last="link")) leads to the saved file
            self._state.directory = rank_folder(_resolved(trainer.ckpt_path))
        states = checkpoint.get("callbacks") or {}
        if self.state_key not in states and self._legacy_state_key not in states:
            self._pending = self._state.check({})

    def _no_callback_states(self, trainer: pl.Trainer) -> None:
        """A checkpoint saved weights-only reaches no callback: vote on "no entry" here."""
        if trainer.ckpt_path and not self._loaded:
            self._loaded = True
            self._pending = self._state.check({})

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Verify every stream of every rank against the plan."""
        if self.verify:
            check_world(self._seeded_mesh)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Restore the checkpoint's streams, if one was loaded: see :meth:`load_state_dict`."""
        self._no_callback_states(trainer)
        if self._pending is None:
            return
        fit_loop = trainer.fit_loop
        loaders = [] if fit_loop._combined_loader is None else fit_loop._combined_loader.flattened
        refuse_persistent_workers(loaders, "HwrngCallback")
        self._restore_pending()
        if fit_loop._combined_loader is None:
            return
        # Lightning made the epoch's iterator before this hook; remake it from the restored
        # streams, as the uninterrupted run made it (the new one draws its base seed now).
        # At an epoch boundary, Lightning 2.6.6 made it before it set the samplers' epoch:
        # with workers, a DistributedSampler replayed epoch 0's order (measured).
        if not fit_loop.restarted_mid_epoch:
            for loader in loaders:
                _set_sampler_epoch(loader, fit_loop.epoch_progress.current.processed)
        elif any(not callable(getattr(loader, "state_dict", None)) for loader in loaders):
            warnings.warn(
                "hwrng: resumed in the middle of an epoch with a DataLoader that keeps no "
                "position: Lightning serves the epoch's first batches again (measured with "
                "2.6.6), so the data differ from the uninterrupted run's although every RNG "
                "stream was restored; checkpoint at epoch ends, or use a stateful loader "
                "(torchdata's StatefulDataLoader)",
                HwrngWarning,
                stacklevel=2,
            )
        iter(fit_loop._data_fetcher)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Outside fitting (``trainer.validate(ckpt_path=...)``), restore the streams here."""
        if trainer.state.fn != "fit":
            self._no_callback_states(trainer)
            self._restore_pending()

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """``trainer.test(ckpt_path=...)``: restore the streams here."""
        self._no_callback_states(trainer)
        self._restore_pending()

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """``trainer.predict(ckpt_path=...)``: restore the streams here."""
        self._no_callback_states(trainer)
        self._restore_pending()

    def state_dict(self) -> dict[str, Any]:
        """The entry every rank shares; each rank writes its own beside the checkpoint.

        A collective: Lightning calls it on every rank, inside ``save_checkpoint``.
        """
        return self._state.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Agree on every rank on the checkpoint's verdict now; carry it out when training starts.

        Lightning calls this on every rank at the same point, so the
        collective vote of :meth:`hwrng.RNGState.check` runs here: every rank
        accepts, or every rank raises before any rank changes anything (a
        checkpoint of another world size, a corrupt entry, or a refusal on
        any one rank). Lightning restores callbacks before it sets up its
        data, and setting up makes a data-loader iterator (a draw from
        torch's generator); the agreed restore therefore runs, without a
        collective, in ``on_train_start`` (or when a validate, test or
        predict run starts), which then makes the iterator again.
        """
        self._pending = self._state.check(state_dict)

    def _restore_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending()


def seed_fabric(
    seed: int,
    *,
    mesh: MeshLike = None,
    sharded_dims: Sequence[str] | None = None,
    verify: bool = True,
    platform: Platform | str | None = None,
) -> Any:
    """For Fabric, after ``fabric.launch()``: seed each rank as :class:`HwrngCallback` does.

    Returns the mesh seeded for (``None`` for a single process). Put
    :func:`fabric_rng_state` in the state you give ``fabric.save`` and
    :func:`load_fabric`.
    """
    mesh_seeded = seed_world(seed, mesh, sharded_dims, platform)
    if verify:
        check_world(mesh_seeded)
    return mesh_seeded


def fabric_rng_state(
    path: str | os.PathLike[str],
    *,
    on_mismatch: OnMismatch = "error",
    mesh: Any = None,
    platform: Platform | str | None = None,
) -> RNGState:
    """The :class:`hwrng.RNGState` of a Fabric checkpoint at ``path``.

    Fabric calls its ``state_dict`` on every rank and writes rank 0's dict:
    each rank writes its own entry into a new set in :func:`rank_folder` of
    the checkpoint, and the checkpoint holds the entry all ranks share. Save
    with :func:`save_fabric` and load with :func:`load_fabric`, which put the
    files beside the path they are given (one state serves a loop saving to
    ``step-<k>.ckpt``) and remove the sets of earlier saves to that path once
    the new checkpoint is written; with ``fabric.save`` itself the files go
    beside ``path``, and you call the state's ``commit(path)`` on every rank
    after it. Give it the mesh :func:`seed_fabric` returned, for
    ``on_mismatch="reseed"``.
    """
    return RNGState(
        on_mismatch=on_mismatch, mesh=mesh, platform=platform, directory=rank_folder(path)
    )


def save_fabric(
    fabric: Any, path: str | os.PathLike[str], state: dict[str, Any], **kwargs: Any
) -> None:
    """``fabric.save(path, state, **kwargs)``, each ``RNGState`` of ``state`` beside ``path``.

    Every :class:`hwrng.RNGState` in ``state`` writes its per-rank files
    into :func:`rank_folder` of *this* ``path`` (whatever path it was made
    for), so a loop saving to ``step-<k>.ckpt`` keeps every checkpoint whole.
    ``fabric.save`` writes rank 0's dict and waits for every rank; only then
    does each ``RNGState`` commit (:meth:`hwrng.RNGState.commit` with ``path``:
    the sets no file beside ``path`` names go), so a save that fails or is cut
    short at any point leaves the previous checkpoint whole. Call it on every
    rank, as ``fabric.save``.
    """
    states = [value for value in state.values() if isinstance(value, RNGState)]
    before = [value.directory for value in states]
    try:
        for value in states:
            value.directory = rank_folder(path)
        fabric.save(path, state, **kwargs)
        for value in states:
            value.commit(os.fspath(path))
    finally:
        for value, directory in zip(states, before, strict=True):
            value.directory = directory


def load_fabric(
    fabric: Any, path: str | os.PathLike[str], state: dict[str, Any], **kwargs: Any
) -> dict[str, Any]:
    """``fabric.load(path, state, **kwargs)``, with each ``RNGState`` of ``state`` voting.

    Fabric skips a state the checkpoint does not hold (``strict=False``) or
    raises a ``KeyError`` for it; a checkpoint written without hwrng would
    leave the streams at their seeds. Here Fabric loads everything else, and
    each ``RNGState`` then gets its entry, reading its per-rank files beside
    ``path`` (as :func:`save_fabric` wrote them) -- or, where the checkpoint
    has none, votes on "no entry": refused, or new streams under
    ``on_mismatch="reseed"``, on every rank alike (call it on every rank, as
    ``fabric.load``).

    Returns
    -------
    dict
        What ``fabric.load`` returned, less the hwrng entries.
    """
    rng = {name: value for name, value in state.items() if isinstance(value, RNGState)}
    others = {name: value for name, value in state.items() if name not in rng}
    remaining: dict[str, Any] = fabric.load(path, others, **kwargs)
    state.update(others)  # Fabric puts plain values it restored into the dict it was given
    for name, entry_state in rng.items():
        before = entry_state.directory
        entry_state.directory = rank_folder(_resolved(path))
        try:
            entry_state.load_state_dict(remaining.pop(name, {}))
        finally:
            entry_state.directory = before
    return remaining
