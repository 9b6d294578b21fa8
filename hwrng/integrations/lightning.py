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
    state = {"model": model, "optimizer": optimizer, "rng": hwrng.RNGState()}
    fabric.save(path, state)  # ... later, in fresh processes: fabric.load(path, state)

Requires ``pip install "hwrng[lightning]"``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.utilities.data import _set_sampler_epoch

from hwrng._checkpoint import OnMismatch
from hwrng._dcp import RNGState
from hwrng._platform import Platform
from hwrng.integrations._world import MeshLike, check_world, seed_world

__all__ = ["HwrngCallback", "seed_fabric"]


class HwrngCallback(pl.Callback):
    """Seed each rank for its place in the mesh, verify, and checkpoint every rank's streams.

    - ``setup`` (every stage, once torch.distributed is up): :func:`hwrng.manual_seed`
      on ``mesh`` -- by default a 1-D ``("dp",)`` mesh over the world, each
      rank its own seed; with ``sharded_dims`` naming dims of your mesh,
      replicas along the others share one.
    - ``on_fit_start``: :func:`hwrng.verify` over every rank; raises
      :class:`~hwrng.VerificationError` naming offenders (``verify=False`` skips it).
    - checkpoints: the callback's ``state_dict`` gathers every rank's complete
      state (:class:`hwrng.RNGState`) into the checkpoint rank 0 writes;
      ``trainer.fit(ckpt_path=...)`` gives each rank its own back, bit for bit,
      or every rank refuses (another world size, backend, corrupt entry, a
      refusal on any one rank) before any rank changes anything.

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
        As for :func:`hwrng.load_state_dict`.

    Notes
    -----
    Use ``DataLoader(worker_init_fn=hwrng.worker_init_fn)`` for augmentations
    in workers. Tested: checkpoints at epoch ends resume bit for bit. A
    mid-epoch checkpoint also needs the sampler's position, which hwrng does
    not hold (see the README's checkpoint section).
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

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Seed this rank (the checkpoint, if any, is restored after this)."""
        self._seeded_mesh = seed_world(self.seed, self.mesh, self.sharded_dims, self.platform)
        self._state.mesh = self._seeded_mesh

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Verify every stream of every rank against the plan."""
        if self.verify:
            check_world(self._seeded_mesh)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Restore the checkpoint's streams, if one was loaded: see :meth:`load_state_dict`."""
        if self._pending is None:
            return
        self._restore_pending()
        fit_loop = trainer.fit_loop
        if fit_loop.restarted_mid_epoch or fit_loop._combined_loader is None:
            return
        # Resuming at an epoch boundary, Lightning made the epoch's iterator before it set the
        # samplers' epoch: with workers, a DistributedSampler's indices were already drawn in
        # epoch 0's order (measured with 2.6.6). Set the epoch and make the iterator again,
        # from the restored streams, as the uninterrupted run did.
        for loader in fit_loop._combined_loader.flattened:
            _set_sampler_epoch(loader, fit_loop.epoch_progress.current.processed)
        iter(fit_loop._data_fetcher)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Outside fitting (``trainer.validate(ckpt_path=...)``), restore the streams here."""
        if trainer.state.fn != "fit":
            self._restore_pending()

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """``trainer.test(ckpt_path=...)``: restore the streams here."""
        self._restore_pending()

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """``trainer.predict(ckpt_path=...)``: restore the streams here."""
        self._restore_pending()

    def state_dict(self) -> dict[str, Any]:
        """Every rank's RNG state (a collective: Lightning calls it on every rank)."""
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

    Returns the mesh seeded for (``None`` for a single process). Put an
    :class:`hwrng.RNGState` (with this mesh, for ``on_mismatch="reseed"``) in
    the state you give ``fabric.save`` and ``fabric.load``: Fabric calls its
    ``state_dict`` on every rank and writes rank 0's, as the Trainer does, and
    calls its ``load_state_dict`` on every rank.
    """
    mesh_seeded = seed_world(seed, mesh, sharded_dims, platform)
    if verify:
        check_world(mesh_seeded)
    return mesh_seeded
