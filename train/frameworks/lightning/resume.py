"""Lightning 2.6's own resume after a crash (issue 15, workload=resume): what its docs show, as shipped.
ModelCheckpoint(every_n_epochs=1, save_last=True) saves a checkpoint at the end of every training epoch, and every
attempt that torch elastic makes (launch.max_restarts) starts with trainer.fit(model, ckpt_path="last"): Lightning
finds the last checkpoint itself, restores the weights, optimizer, schedule and loops, and trains on from there.

What Lightning does, as shipped (pytorch_lightning 2.6.6, fsspec 2026.9.0):
- Each epoch's save: ModelCheckpoint writes epoch=<k>-step=<n>.ckpt, then last.ckpt, each a whole save through
  Trainer.save_checkpoint (rank 0 writes, then a barrier). With save_last="link" (checkpoint.pointer here)
  last.ckpt is a symlink to the newest file instead, made after that file is written: a pointer written last.
- TorchCheckpointIO writes through _atomic_save: torch.save into memory, then an fsspec transaction, which writes a
  temporary file in the system's temp folder and moves it onto the name at commit (Lightning#20011). A kill in the
  middle of the write leaves the temporary file, never a torn checkpoint under its name.
- ckpt_path="last": EVERY rank lists the checkpoint folder itself (ModelCheckpoint._find_last_checkpoints, through
  the fsspec filesystem) and takes the newest last*.ckpt by modification time; with none it warns and starts from
  scratch. Nothing makes the ranks agree on the file: a rank that lists the folder differently resumes elsewhere.
- Every rank reads its checkpoint (CheckpointIO.load_checkpoint) and loads the weights; then DDPStrategy.setup wraps
  the model in DDP, whose constructor copies rank 0's weights to every rank. So the resume event's digest is of the
  state dict the rank READ (before that broadcast); the epoch and step it restored are its own and are not synced.
- Rotation (checkpoint.keep_last: save_top_k=N, monitor="step", mode="max", Lightning's documented "keep the
  newest N") deletes through strategy.remove_checkpoint, which DDPStrategy runs on global rank 0 only.

Seams, all public (no private method is patched):
  ResumeCheckpointIO  a TorchCheckpointIO subclass (Trainer(plugins=[...])): save_* events around each save on rank 0,
                      load_attempt/load_error/resume around the resume's read on every rank, rotate/rotate_error
                      around rank 0's deletes; each calls the shipped implementation (super())
  FaultyFileSystem    (train/frameworks/lightning/) fsspec's local filesystem: the bytes of a save pass through
                      faults.resume_write (kill_at=mid_write: rank 0 killed halfway through the real write), and the
                      folder listing that ckpt_path="last" makes goes through faults.listing (stale_listing)
  ResumeCheckpoint    ModelCheckpoint whose on_train_epoch_end (a public hook) is the shipped one, then
                      faults.kill_point("after_save"): the kill comes once the epoch's whole save is done
  ResumeCallback      closes the listing window and records a fresh start (its weights before DDP's broadcast)

Fixes (fix.name): as_shipped (Lightning unmodified), agreed (rank 0 finds the last checkpoint by Lightning's
rule and every rank resumes from that one: fit(ckpt_path=<rank 0's choice>), train/fixes.rank0_decides), rank0_leads
(the file users copy, rank0_leads.py: rank 0 picks the newest whole last*.ckpt, reads it and sends it), own (a
ModelCheckpoint or TorchCheckpointIO of yours under the observed one, fit given fix.ckpt_path: "last", or what a
function of yours picks, lightning_package.py running it under the Lightning it is written against). The others
are n/a (configs/framework/lightning.yaml says why: atomic, manifest and rank0_rotates are there as shipped).
checkpoint.async_save: Lightning's AsyncCheckpointIO around the CheckpointIO (async_save.py: scenario=async_top_k, its
fix on_durable).
scenario=cleanup's delete_race needs two ranks deleting one file; Lightning deletes on rank 0 alone, so the fault
has no second deleter to meet: it is not placed, and the cell measures Lightning's rotation as it is.

Noted, not under test: where the temp folder is on another filesystem than the checkpoints (TMPDIR local, the
checkpoints on a shared one), fsspec's move at commit is a copy onto the checkpoint's name, not a rename; and
save_last="link" replaces last.ckpt by os.remove, then os.symlink (a kill between them leaves no last.ckpt).
"""
import os
import re
import warnings
from datetime import timedelta
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.plugins import TorchCheckpointIO
from pytorch_lightning.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset

from train.fixes import SyncFailed, rank0_decides, watched
from train.toolkit.listing import stale_listing
from train.toolkit.rank import Rank, checkpoint_dir, named_class, say
from train.toolkit.model import digits_split, small_cnn
from train.toolkit.errors import error_fields
from train.toolkit.model import weights_digest
from train.toolkit.resume import start_attempt
from train.events import attempt
from train.frameworks.lightning.seams import FaultyFileSystem, quiet, use_faulty_filesystem
from train.frameworks.lightning.rank0_leads import Rank0LeadsCheckpointIO, rank0_last_checkpoint
from train.frameworks.lightning.async_save import ASYNC_FIXES, async_io


LAST = re.compile(r"^last(-v?\d+)?\.ckpt$")  # ModelCheckpoint's last checkpoint and its versions (last-v1.ckpt)


class Recorded(Exception):
    """Marks an error whose event is recorded already (load_error, rotate_error): not a train_error too."""


class ResumeCheckpointIO(TorchCheckpointIO):
    """Lightning's TorchCheckpointIO, observed; the shipped save, read and delete run unchanged (super()).
    rank: this rank's context; resume: the LightningResume it reports to (what the rank listed)."""

    def __init__(self, rank: Rank, resume, **kwargs):
        super().__init__(**kwargs)  # kwargs: fix=own's fix.kwargs, for a CheckpointIO of yours under this one
        self.events, self.faults, self.resume = rank.events, rank.faults, resume

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        """Rank 0 only (DDPStrategy.save_checkpoint), before Trainer.save_checkpoint's barrier."""
        epoch, step = checkpoint["epoch"], checkpoint["global_step"]  # the epoch just trained; optimizer steps done
        self.events.record("save_start", epoch=epoch, step=step, path=str(path))
        FaultyFileSystem.write_fault = lambda f, data: self.faults.resume_write(f, data, epoch, path)
        try:
            super().save_checkpoint(checkpoint, path, storage_options)
        finally:
            FaultyFileSystem.write_fault = None
        self.events.record("save_end", epoch=epoch, step=step, path=str(path),
                           digest=weights_digest(checkpoint["state_dict"]), bytes=os.path.getsize(path),
                           **self.save_fields(path))

    def save_fields(self, path) -> dict:
        """More fields of a save_end: none; an async save's when it was dispatched and durable (async_save.py)."""
        return {}

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        """Every rank, from fit(ckpt_path=...): the resume's read, with weights_only=True (no foreign code runs).
        A failed read is recorded and raised: the rank dies and torch elastic restarts the group."""
        size = os.path.getsize(path) if os.path.exists(path) else None
        self.events.record("load_attempt", path=str(path), bytes=size)
        try:
            checkpoint = super().load_checkpoint(path, map_location="cpu", weights_only=True)
        except SyncFailed:  # rank0_leads' collective (recorded)
            raise
        except Exception as e:
            self.events.record("load_error", path=str(path), **error_fields(e))
            say(f"Resume from {Path(path).name} failed: {type(e).__name__}: {e}")
            raise Recorded(f"resume from {path}") from e
        epoch, step = checkpoint["epoch"], checkpoint["global_step"]
        # the state dict it read is what restore_model loads, before DDP's constructor copies rank 0's weights
        self.events.record("resume", epoch=epoch, step=step, path=str(path),
                           digest=weights_digest(checkpoint["state_dict"]), listing=self.resume.listed)
        self.resume.resumed = True
        say(f"Resumed from {Path(path).name} (epoch {epoch}, step {step}).")
        return checkpoint

    def remove_checkpoint(self, path):
        """ModelCheckpoint's rotation: rank 0 only (DDPStrategy.remove_checkpoint)."""
        try:
            super().remove_checkpoint(path)
        except OSError as e:
            self.events.record("rotate_error", path=str(path), **error_fields(e))
            say(f"Deleting {Path(path).name} failed: {type(e).__name__}: {e}")
            raise Recorded(f"deleting {path}") from e
        self.events.record("rotate", path=str(path))


class ResumeCheckpoint(ModelCheckpoint):
    """ModelCheckpoint as shipped; once its save at the end of an epoch is done (the checkpoint, last.ckpt, the
    rotation), fault.kill_at=after_save may kill rank 0 there. faults: train/faults.py's points."""

    def __init__(self, faults, **kwargs):
        super().__init__(**kwargs)
        self.faults = faults

    def on_train_epoch_end(self, trainer, pl_module):
        super().on_train_epoch_end(trainer, pl_module)
        self.faults.kill_point("after_save", trainer.current_epoch, self.last_model_path)


def observed(observer: type, yours: type, kwargs: dict) -> type:
    """The observer (ResumeCheckpoint, ResumeCheckpointIO) over your class with fix=own: its calls to super() reach
    your methods first, and it is built with the observer's arguments and fix.kwargs."""
    def __init__(self, *args, **arguments):
        observer.__init__(self, *args, **arguments, **kwargs)

    return type(f"Resume{yours.__name__}", (observer, yours), {"__init__": __init__})


class ResumeCallback(Callback):
    """setup (after Lightning chose the checkpoint, before it reads it): the listing window closes, and the
    weights a fresh start begins with are taken; on_train_start: fit_start, and a fresh start's resume event."""

    def __init__(self, rank: Rank, resume):
        self.rank, self.resume = rank, resume
        self.initial = None  # the digest of the weights before any resume and before DDP's broadcast

    def setup(self, trainer, pl_module, stage):
        FaultyFileSystem.listing = None
        self.initial = weights_digest(pl_module.state_dict())

    def on_train_start(self, trainer, pl_module):
        if not self.resume.resumed:
            self.rank.events.record("resume", epoch=-1, step=0, path=None, digest=self.initial,
                                    listing=self.resume.listed)
            say("No last checkpoint: a fresh start.")
        self.rank.events.record("fit_start", train_batches=trainer.num_training_batches,
                                node_local=self.rank.cfg["checkpoint"]["node_local"], start_epoch=trainer.current_epoch)


class ResumeModule(pl.LightningModule):
    """small_cnn(1) on digits, SGD without momentum as the torch_loop's, so that a checkpoint is the model, its
    step and Lightning's own loop state. lr: the step size."""

    def __init__(self, lr: float):
        super().__init__()
        self.model, self.lr = small_cnn(1), lr

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class LightningResume:
    def __init__(self, rank: Rank):
        cfg = rank.cfg
        self.rank, self.cfg, self.events, self.faults = rank, cfg, rank.events, rank.faults
        fix = cfg["fix"]["name"]
        # ckpt_path(self): what fit is given, as the fix has it; an async save's fix changes its CheckpointIO alone
        self.ckpt_path = LightningResume.last_each_rank_finds if fix in ASYNC_FIXES else BY_FIX[fix]
        self.folder = checkpoint_dir(cfg)
        self.keep = cfg["checkpoint"]["keep_last"]  # 0: keep all
        self.use_pointer = cfg["checkpoint"]["pointer"]  # last.ckpt as a symlink (save_last="link")
        self.listed = []  # the last*.ckpt names this rank saw when it looked for the last checkpoint
        self.resumed = False  # set by ResumeCheckpointIO once a checkpoint is read

    def run(self):
        cfg = self.cfg
        start_attempt(self.rank, self.folder)
        quiet()
        warnings.filterwarnings("ignore", message=r".*there is no last checkpoint available.*")  # a fresh start
        use_faulty_filesystem()
        pl.seed_everything(cfg["seed"], verbose=False)

        x_train, y_train, _, _ = digits_split(cfg["data"], cfg["seed"])
        train_dl = DataLoader(TensorDataset(x_train, y_train), batch_size=cfg["data"]["batch_size"], shuffle=True)
        module = ResumeModule(cfg["lr"])
        strategy = DDPStrategy(process_group_backend=self.rank.plan["backend"],
                               timeout=timedelta(seconds=cfg["timeout"]["collective_s"]))
        # save_top_k: every epoch's file, or the newest keep_last of them (Lightning's "monitor the step" recipe)
        rotation = {"save_top_k": self.keep, "monitor": "step", "mode": "max"} if self.keep else {"save_top_k": -1}
        saver = self.checkpoint_class()(self.faults, dirpath=self.folder, every_n_epochs=1,
                                        save_on_train_epoch_end=True, save_last="link" if self.use_pointer else True,
                                        **rotation)
        trainer = pl.Trainer(accelerator=self.rank.device.type, devices=cfg["world_size"] // cfg["nnodes"],
                             num_nodes=cfg["nnodes"], strategy=strategy,
                             callbacks=[saver, ResumeCallback(self.rank, self)],
                             plugins=[self.checkpoint_io()],
                             enable_progress_bar=False,
                             enable_model_summary=False, logger=False, max_epochs=cfg["epochs"],
                             num_sanity_val_steps=0)

        try:
            trainer.fit(module, train_dl, ckpt_path=self.ckpt_path(self))
        except SyncFailed:
            raise RuntimeError("a sync failed (recorded)") from None
        except Recorded:
            raise
        except Exception as e:  # recorded, then the rank dies: torch elastic restarts the group
            self.events.record("train_error", epoch=trainer.current_epoch, **error_fields(e))
            say(f"trainer.fit failed: {type(e).__name__}: {e}")
            raise
        finally:
            FaultyFileSystem.listing = None
        self.events.record("train_end")
        # its parameters, which DDP keeps equal on every rank; BatchNorm's statistics are each rank's last batch's
        self.events.record("final", digest=weights_digest(dict(module.named_parameters())))

    def checkpoint_class(self) -> type:
        """The ModelCheckpoint: ResumeCheckpoint, over a ModelCheckpoint of yours with fix=own (its calls to super()
        reach your methods first; it is built with fix.kwargs too)."""
        yours = self.yours()
        if yours is None or not issubclass(yours, ModelCheckpoint):
            return ResumeCheckpoint
        return observed(ResumeCheckpoint, yours, self.cfg["fix"]["kwargs"])

    def checkpoint_io(self):
        """The CheckpointIO plugin: the fix's (ResumeCheckpointIO as shipped, over a CheckpointIO of yours with
        fix=own); with checkpoint.async_save, Lightning's AsyncCheckpointIO around it (async_save.py)."""
        io = IO_BY_FIX.get(self.cfg["fix"]["name"], ResumeCheckpointIO)
        yours = self.yours()
        if yours is not None and not issubclass(yours, ModelCheckpoint):
            io = observed(ResumeCheckpointIO, yours, self.cfg["fix"]["kwargs"])
        return async_io(io, self.rank, self) if self.cfg["checkpoint"]["async_save"] else io(self.rank, self)

    def yours(self):
        """fix=own's class (fix._target_: a ModelCheckpoint or a TorchCheckpointIO of yours), else None."""
        return named_class(self.cfg["fix"]["_target_"]) if self.cfg["fix"]["name"] == "own" else None

    def last_each_rank_finds(self):
        """As shipped: fit is given "last", and every rank finds it itself, through the listing seam."""
        FaultyFileSystem.listing = self.see
        return "last"

    def last_yours_finds(self):
        """fix=own: fix.ckpt_path, "last" (as shipped, every rank finds it) or a function of yours, module.function,
        called on every rank with the checkpoint folder, as your script calls it for fit(ckpt_path=...). After a
        restart, resume_disagree's stale listing is placed in os.listdir and os.scandir of the folder on every rank
        but 0 for that call (train/toolkit/listing.py)."""
        named = self.cfg["fix"]["ckpt_path"]
        if named == "last":
            return self.last_each_rank_finds()
        pick = named_class(named)
        if self.cfg["fault"]["stale_listing"] and self.faults.rank != 0 and attempt() > 0:
            with stale_listing(self.folder, self.events):
                return pick(self.folder)
        return pick(self.folder)

    def last_rank0_finds(self):
        """agreed: fit is given the file rank 0 finds by Lightning's own rule, the same on every rank (None: a fresh
        start everywhere)."""
        return rank0_decides(self.events, self.newest_last)

    def last_rank0_leads(self):
        """rank0_leads: the file users copy (rank0_leads.py) has rank 0 choose the newest whole last*.ckpt (its
        collective watched, as agreed's)."""
        chosen = {}
        if not watched(self.events, "agree", lambda: chosen.update(path=rank0_last_checkpoint(self.folder))):
            raise SyncFailed
        return chosen["path"]

    def see(self, folder: str, paths: list) -> list:
        """The listing of the checkpoint folder as this rank sees it: its last*.ckpt, oldest first by modification
        time, through faults.listing (stale_listing hides the newest from every rank but 0 after a restart)."""
        if os.path.normpath(folder) != os.path.normpath(self.folder):
            return paths
        last = sorted((p for p in paths if LAST.match(os.path.basename(p))), key=modified)
        seen = self.faults.listing(last)
        self.listed = [os.path.basename(p) for p in seen]
        return [p for p in paths if p in seen or not LAST.match(os.path.basename(p))]

    def newest_last(self):
        """agreed, on rank 0: Lightning's rule for ckpt_path="last" (the newest last*.ckpt by modification time,
        checkpoint_connector._parse_ckpt_path) over its own listing; None when there is none."""
        seen = self.see(self.folder, [os.path.join(self.folder, n) for n in os.listdir(self.folder)])
        last = [p for p in seen if LAST.match(os.path.basename(p))]
        return max(last, key=modified) if last else None


# the dispatch: fix.name -> the ckpt_path that fit(ckpt_path=...) is given (framework.py names these fixes)
BY_FIX = {"as_shipped": LightningResume.last_each_rank_finds, "agreed": LightningResume.last_rank0_finds,
          "rank0_leads": LightningResume.last_rank0_leads, "own": LightningResume.last_yours_finds}


def watched_broadcast(self, box: list):
    """rank0_leads.py's collective (Rank0LeadsCheckpointIO.broadcast), between sync events."""
    if not watched(self.events, "broadcast", lambda: Rank0LeadsCheckpointIO.broadcast(self, box)):
        raise SyncFailed


# fix.name -> the CheckpointIO class, where it is not ResumeCheckpointIO alone: rank0_leads.py's, observed (rank 0
# reads the resume's checkpoint and sends it; its saves reach their name whole)
IO_BY_FIX = {"rank0_leads": type("ResumeRank0LeadsCheckpointIO", (ResumeCheckpointIO, Rank0LeadsCheckpointIO),
                                  {"broadcast": watched_broadcast})}


def modified(path: str) -> float:
    """A checkpoint's modification time as Lightning's fs.modified has it: fsspec's info follows a symlink, so a
    last.ckpt link (save_last="link") has the time of the file it names; a link to no file (an async save's that
    never landed) its own, and Lightning then passes it over (its fs.exists is False)."""
    return os.stat(path).st_mtime if os.path.exists(path) else os.lstat(path).st_mtime


def fit_and_resume(rank: Rank):
    """workload=resume: Lightning's own resume, fit(ckpt_path="last") at the start of every attempt."""
    LightningResume(rank).run()
