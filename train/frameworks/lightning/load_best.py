"""Lightning 2.6: ModelCheckpoint(monitor="val_acc", mode="max", save_top_k=1) keeps the best model, and
trainer.validate(ckpt_path="best") loads it on every rank at the end (what Lightning's docs show).

What Lightning does, as shipped (pytorch_lightning 2.6.6, lightning_fabric 2.6.6):
- ModelCheckpoint saves at the end of each training epoch that improves val_acc (the ranks agree on "new best"
  with reduce_boolean_decision, a collective): Trainer.save_checkpoint builds the checkpoint on every rank,
  strategy.save_checkpoint writes it on global rank 0 only (TorchCheckpointIO: torch.save into memory, then an
  fsspec transaction, Lightning#20011), then strategy.barrier("Trainer.save_checkpoint").
- validate(ckpt_path="best") reads ModelCheckpoint.best_model_path on every rank (CheckpointIO.load_checkpoint),
  then strategy.setup broadcasts rank 0's weights to the others (_sync_module_states). So a rank's final weights
  can hide what it read: load_done carries the digest of the state dict it READ.
- Lightning finds the process group that train/rank/worker.py created (it does not create another, nor destroy it).

Seams, all public (no private method is patched):
  RaceCheckpointIO   a TorchCheckpointIO subclass (Trainer(plugins=[...])): save_checkpoint on rank 0 before the
                     barrier (save_* events), load_checkpoint on every rank (before_load, load_* events); it calls
                     the shipped implementation (super()), and the fixes plug in here (train/fixes.py)
  FaultyFileSystem   fsspec's LocalFileSystem, registered for "file" (fsspec.register_implementation): the file
                     object that Lightning's fsspec transaction writes into passes the bytes through faults.write
  WatchedDDPStrategy DDPStrategy whose barrier and reduce_boolean_decision are watched (sync_* events) from the
                     last epoch's save on; a failed one raises SyncFailed into Lightning where its own error went
  RaceCallback       fit_start; before_last_save in the last epoch's on_train_epoch_end, which Lightning runs
                     before ModelCheckpoint's own (checkpoint callbacks run last): the skew lands before the save
  DigitsModule       val_acc over every rank, shaped by faults.shape_metric, is the monitored value

Lightning saves on improvement only, where fastai's last epoch always saves; on digits val_acc is 1.0 from the
second epoch on, so the last epoch would not save and a scenario's faults at the last save would meet none. So
configs/framework/lightning.yaml sets fault.best_epoch=-1 (every epoch improves; a scenario's own value wins):
the last epoch saves, after the earlier ones. checkpoint.early_saves has no effect: ModelCheckpoint saves every improvement.

Fixes (fix.name): as_shipped (Lightning unmodified), broadcast (rank 0 reads, the others get its checkpoint
through a collective: train/fixes.broadcast_read), agreed (a failed save is recorded instead of raised, and rank 0
decides for every rank whether to load: train/fixes.agree), rank0_leads (the file users copy, rank0_leads.py: rank 0
decides and reads, every rank gets its decision and checkpoint; a failed save is kept, not raised).
checkpoint.guard: a local exists() check before
validate, as a user's `if os.path.exists(best): trainer.validate(...)` would have it. scenario=many_writers is
n/a (its yaml says why). An error out of fit or validate is said, not raised: the rank still records its final
weights, and one whose fit failed never reaches validate, as a user's script would not.

Noted, not under test: fsspec's transaction writes to a temporary file in the system's temp folder and moves it
onto the checkpoint's name at commit; on another filesystem (a node's own disk here) the move is a copy.
"""
import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.plugins import TorchCheckpointIO
from pytorch_lightning.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset

from train.fixes import SyncFailed, agree, broadcast_read, watched
from train.toolkit.rank import Rank, checkpoint_dir, last_epoch, local_rank, named_class, say
from train.toolkit.model import digits_split, small_cnn, weights_digest
from train.toolkit.errors import error_fields
from train.frameworks.lightning.seams import CHECKPOINT_SUFFIX, FaultyFileSystem, quiet, use_faulty_filesystem
from train.frameworks.lightning.rank0_leads import Rank0LeadsCheckpointIO


# --- save and load: the CheckpointIO plugin ------------------------------------------------------------------

SHIPPED = ("pytorch_lightning", "lightning", "lightning_fabric", "torch", "abc", "builtins")  # not a class under test


class SkippedLoad(Exception):
    """Every rank agreed not to load (the skip event says why); validate ends here on every rank."""


class RaceCheckpointIO(TorchCheckpointIO):
    """Lightning's TorchCheckpointIO, observed; a fix changes how the load reads (broadcast) or whether every rank
    loads (agreed). rank: this rank's context; way: how the fix is done (BY_FIX's)."""

    def __init__(self, rank: Rank, way, **kwargs):
        super().__init__(**kwargs)  # kwargs: fix=own's fix.kwargs, for a CheckpointIO of yours
        self.rank, self.events, self.faults, self.way = rank, rank.events, rank.faults, way
        self.save_ok = None  # the last save's result, on rank 0
        self.loaded = False  # its load ended well (load_done): an error out of validate after it is a train_error

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        """Rank 0 only (DDPStrategy.save_checkpoint), before Trainer.save_checkpoint's barrier."""
        epoch = checkpoint["epoch"]
        self.events.record("save_start", epoch=epoch, path=str(path))
        last, raised = epoch == last_epoch(self.rank.cfg), []
        FaultyFileSystem.write_fault = lambda f, data: self.write(f, data, last, raised)
        try:
            super().save_checkpoint(checkpoint, path, storage_options)
            caught = raised[-1] if raised else None  # the class under test caught its write's error (rank0_leads)
        except OSError as e:
            self.save_error(epoch, e)
            if not self.way.agreed:
                raise  # as shipped: out of Trainer.save_checkpoint, before its barrier
            return  # agreed: training goes on, and the load's decision says the save failed
        finally:
            FaultyFileSystem.write_fault = None
        if caught:  # failed all the same
            return self.save_error(epoch, caught)
        self.save_ok = True
        self.events.record("save_end", epoch=epoch, path=str(path), digest=weights_digest(checkpoint["state_dict"]),
                           bytes=os.path.getsize(path))
        say("Model saved.")

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        """Every rank, from validate(ckpt_path="best"): the digest recorded is of the state dict it read."""
        self.faults.before_load()
        if self.way.agreed and not agree(self.events, lambda: self.decide(path)):
            raise SkippedLoad("every rank agreed not to load")
        try:
            if self.way.broadcast:
                checkpoint = broadcast_read(self.events, lambda: self.read(path, map_location))
            else:
                checkpoint = self.read(path, map_location)
        except SyncFailed:
            raise
        except Exception as e:
            if not self.raised_by_the_class_under_test(e):
                self.events.record("load_error", **error_fields(e))
                say(f"Load failed: {type(e).__name__}: {e}")
                raise
            self.events.record("skip", reason=str(e))  # its own decision not to load (rank0_leads: NotLoaded)
            say(f"Not loading: {e}")
            raise SkippedLoad(str(e)) from e
        self.events.record("load_done", path=str(path), digest=weights_digest(checkpoint["state_dict"]))
        self.loaded = True
        say("Loaded model.")
        return checkpoint

    def raised_by_the_class_under_test(self, e: Exception) -> bool:
        """Whether the CheckpointIO under test (a class of yours, or rank0_leads.py's) raised `e` itself, in its own
        file, rather than a read it called: its decision not to load on this rank. Judged by where it was raised,
        never by the class's name or the exception's type."""
        modules = [sys.modules.get(c.__module__) for c in type(self).__mro__
                   if c.__module__.split(".")[0] not in SHIPPED and c.__module__ != __name__]
        files = {os.path.abspath(m.__file__) for m in modules if getattr(m, "__file__", None)}
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in files

    def save_error(self, epoch: int, e: OSError):
        self.save_ok = False
        self.events.record("save_error", epoch=epoch, **error_fields(e))
        say(f"Save failed: {type(e).__name__}: {e}")

    def write(self, f, data, last: bool, raised: list):
        """The scenario's write point; an error it raises is kept, so that a save is seen to fail even where the
        class under test catches the error (the save_error event is recorded once its save returns)."""
        try:
            self.faults.write(f, data, last)
        except OSError as e:
            raised.append(e)
            raise

    def read(self, path, map_location):
        """The shipped read (TorchCheckpointIO.load_checkpoint), with weights_only=True: no foreign code runs."""
        size = os.path.getsize(path) if os.path.exists(path) else None
        self.events.record("load_attempt", path=str(path), bytes=size)
        return super().load_checkpoint(path, map_location=map_location or "cpu", weights_only=True)

    def decide(self, path):
        """agreed, on rank 0: (load, why)."""
        if self.save_ok is False:
            return False, "rank 0's save failed"
        if not os.path.exists(path):
            return False, "rank 0 has no checkpoint"
        return True, ""


# --- the strategy: Lightning's DDP over the process group worker.py made, its waits watched ----------------------

class WatchedDDPStrategy(DDPStrategy):
    """DDPStrategy; once `watching` (from the last epoch's save on), its barrier and its "new best?" decision are
    recorded between sync events. A failed one raises SyncFailed (recorded), where Lightning's own error went up."""

    def __init__(self, events, **kwargs):
        super().__init__(**kwargs)
        self.events, self.watching, self.sync_failed = events, False, False

    def barrier(self, name=None):
        return self._watched("barrier", lambda: DDPStrategy.barrier(self, name))

    def reduce_boolean_decision(self, decision, all=True):
        return self._watched("reduce_boolean_decision",
                             lambda: DDPStrategy.reduce_boolean_decision(self, decision, all))

    def _watched(self, how, call):
        if not self.watching:
            return call()
        result = {}

        def wait():
            result["value"] = call()  # None to watched: a decision of False is no failed wait

        if not watched(self.events, how, wait):
            self.sync_failed = True
            raise SyncFailed
        return result["value"]


# --- the model and the faults' callback -----------------------------------------------------------------------

class DigitsModule(pl.LightningModule):
    """small_cnn(1) on digits; val_acc (over every rank) shaped by faults.shape_metric is what ModelCheckpoint
    monitors. lr: the one-cycle schedule's peak, as fastai's fit_one_cycle; faults: train/faults.py's points."""

    def __init__(self, lr: float, faults):
        super().__init__()
        self.model, self.lr, self.faults = small_cnn(1), lr, faults
        self.counts = torch.zeros(2)

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def on_validation_epoch_start(self):
        self.counts = torch.zeros(2)  # right, seen

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.counts += torch.tensor([(self(x).argmax(1) == y).sum().item(), len(y)], dtype=torch.float32)

    def on_validation_epoch_end(self):
        right, seen = self.trainer.strategy.reduce(self.counts, reduce_op="sum").tolist()
        # the same value on every rank already; sync_dist only keeps Lightning from warning that it is not synced
        self.log("val_acc", float(self.faults.shape_metric(right / seen, self.current_epoch)), sync_dist=True)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.lr)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, self.lr,
                                                       total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class RaceCallback(Callback):
    """fit_start, and the last epoch's before_last_save on every rank: Lightning calls this on_train_epoch_end
    before ModelCheckpoint's, which saves there (validation once an epoch)."""

    def __init__(self, rank: Rank):
        self.rank = rank

    def on_train_start(self, trainer, pl_module):
        self.rank.events.record("fit_start", train_batches=trainer.num_training_batches,
                                ddp=isinstance(trainer.strategy, DDPStrategy),
                                node_local=self.rank.cfg["checkpoint"]["node_local"])

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch == last_epoch(self.rank.cfg):
            self.rank.faults.before_last_save()
            trainer.strategy.watching = True


def remove_earlier_checkpoints(folder: str):
    """What an earlier run left in the checkpoint folder (its .ckpt files), as fastai's adapter removes best.pth."""
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            if name.endswith(CHECKPOINT_SUFFIX):
                os.remove(os.path.join(folder, name))


def fit_and_load(rank: Rank):
    cfg, events = rank.cfg, rank.events
    way = BY_FIX[cfg["fix"]["name"]]
    quiet()
    use_faulty_filesystem()
    pl.seed_everything(cfg["seed"], verbose=False)
    folder = checkpoint_dir(cfg)
    if not cfg["checkpoint"]["keep_existing"] and local_rank() == 0:  # each node its own disk, where node-local
        remove_earlier_checkpoints(folder)

    x_train, y_train, x_valid, y_valid = digits_split(cfg["data"], cfg["seed"])
    batch_size = cfg["data"]["batch_size"]
    train_dl = DataLoader(TensorDataset(x_train, y_train), batch_size=batch_size, shuffle=True)
    valid_dl = DataLoader(TensorDataset(x_valid, y_valid), batch_size=batch_size)
    module = DigitsModule(cfg["lr"], rank.faults)
    strategy = WatchedDDPStrategy(events, process_group_backend=rank.plan["backend"],
                                  timeout=timedelta(seconds=cfg["timeout"]["collective_s"]))
    checkpoint_class, io_class = way.classes(cfg)
    best = checkpoint_class(dirpath=folder, filename=cfg["checkpoint"]["name"], monitor="val_acc", mode="max",
                            save_top_k=1)
    checkpoint_io = io_class(rank, way)
    trainer = pl.Trainer(accelerator=rank.device.type, devices=cfg["world_size"] // cfg["nnodes"],
                         num_nodes=cfg["nnodes"], strategy=strategy, callbacks=[best, RaceCallback(rank)],
                         plugins=[checkpoint_io], enable_progress_bar=False, enable_model_summary=False, logger=False,
                         max_epochs=cfg["epochs"])

    fitted = run(events, "trainer.fit", lambda: trainer.fit(module, train_dl, valid_dl), strategy)
    events.record("train_end")
    if fitted:
        say("Attempting to load model.")
        if guard_allows(events, cfg["checkpoint"]["guard"], best.best_model_path):
            run(events, "trainer.validate",
                lambda: trainer.validate(module, valid_dl, ckpt_path="best", verbose=False), strategy)
    events.record("final", digest=weights_digest(module.state_dict()))


def shipped_classes(cfg: dict):
    """(the ModelCheckpoint class, the CheckpointIO class): Lightning's, RaceCheckpointIO observing the shipped one."""
    return ModelCheckpoint, RaceCheckpointIO


def own_classes(cfg: dict):
    """fix=own: (the ModelCheckpoint class, the CheckpointIO class) with yours in its place, built with fix.kwargs
    too. A CheckpointIO of yours (a TorchCheckpointIO subclass) runs under RaceCheckpointIO's observation and faults:
    RaceCheckpointIO's calls to super() reach your methods first."""
    own, kwargs = named_class(cfg["fix"]["_target_"]), cfg["fix"]["kwargs"]
    if issubclass(own, ModelCheckpoint):
        return partial(own, **kwargs), RaceCheckpointIO
    return ModelCheckpoint, partial(type(f"Race{own.__name__}", (RaceCheckpointIO, own), {}), **kwargs)


def rank0_leads_classes(cfg: dict):
    """fix=rank0_leads: the file users copy (rank0_leads.py), its CheckpointIO observed as a class of yours is, and
    its collective watched (sync events), as train/fixes.broadcast_read's is."""
    def broadcast(self, box):
        if not watched(self.events, "broadcast", lambda: Rank0LeadsCheckpointIO.broadcast(self, box)):
            raise SyncFailed

    return ModelCheckpoint, type("RaceRank0LeadsCheckpointIO", (RaceCheckpointIO, Rank0LeadsCheckpointIO),
                                 {"broadcast": broadcast})


@dataclass(frozen=True)
class Way:
    """How the adapter does one fix: each field one difference from Lightning as shipped (as_shipped)."""
    classes: object = shipped_classes  # classes(cfg): the ModelCheckpoint and CheckpointIO classes used
    broadcast: bool = False  # rank 0 reads, the others get its checkpoint through a collective
    agreed: bool = False  # a failed save is recorded, not raised; rank 0 decides for every rank whether to load


# the dispatch: fix.name -> how the adapter does it (framework.py names these fixes, and why it lacks others)
BY_FIX = {
    "as_shipped": Way(),
    "broadcast": Way(broadcast=True),
    "agreed": Way(agreed=True),
    "own": Way(classes=own_classes),
    "rank0_leads": Way(classes=rank0_leads_classes),
}


def run(events, what: str, call, strategy) -> bool:
    """Lightning's fit or validate; its error is said and the rank goes on to record its final weights, so that
    every rank is observed. A rank whose fit failed never reaches validate, as a user's script would not. An error
    out of validate (a collective of validate's that timed out, after its load or before it, a peer gone) is
    recorded as a train_error: load_done alone would say the rank ended well, and no event that it ended well."""
    try:
        call()
        return True
    except SkippedLoad:
        return False  # agreed: the skip event says why
    except Exception as e:
        say(f"{what} failed: {type(e).__name__}: {e}")
        if what == "trainer.fit" and not strategy.sync_failed:  # a failed wait is its own outcome (sync_error)
            events.record("skip", reason=f"trainer.fit raised {type(e).__name__}, so validate(ckpt_path='best') "
                                         "never ran")
        elif what == "trainer.validate" and not strategy.sync_failed:  # after its load, or with none: a peer
            events.record("train_error", what=what, **error_fields(e))  # gone, a collective that timed out
        return False


def guard_allows(events, guard: str, path: str) -> bool:
    """checkpoint.guard: a local exists() check before the load (Lightning's sync is inside its save)."""
    if guard == "none" or (path and os.path.exists(path)):
        return True
    events.record("skip", reason=f"no checkpoint file when it looked (checkpoint.guard={guard})")
    say("No checkpoint file: not loading.")
    return False
