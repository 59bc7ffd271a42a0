"""The fixes under test: fastai SaveModelCallback variants that differ only in how they save,
sync and load. Everything else is shared and lives in RaceSaveModelCallback, the one owner of
the checkpoint's save, wait and load:

- fastai's SaveModelCallback monitoring accuracy; the file holds the best model so far;
- `_should_save`: the last epoch always saves (its skew is the race), and with
  checkpoint.early_saves every improvement before it too;
- a checkpoint left by an earlier run is removed before training (checkpoint.keep_existing);
- when fit ends every rank decides whether to load (checkpoint.guard), syncs, loads, and
  records the digest of the weights it ends with;
- every load is `weights_only=True` (no foreign code runs), and a failed one is recorded, not
  raised, so that every rank is observed;
- what goes wrong is placed by train/faults.py at named points, never here.
"""
import copy
import io

import torch
import torch.distributed as dist
from fastai.callback.tracker import SaveModelCallback, TrackerCallback
from fastai.learner import load_model
from fastai.torch_core import get_model, rank_distrib
from torch.nn.parallel import DistributedDataParallel

from train.fixes import SyncFailed, agree, atomic_write, broadcast_read, dcp_load, dcp_save, wait_for_file, watched
from train.toolkit.errors import error_fields
from train.toolkit.rank import local_rank, say
from train.toolkit.model import weights_digest


def model_digest(model) -> str:
    return weights_digest(get_model(model).state_dict())


class RaceSaveModelCallback(SaveModelCallback):
    """events: this rank's EventLog; faults: train/faults.py's points for this run;
    checkpoint: the checkpoint config (keep_existing, early_saves, guard); timeout_s: how long
    a wait that is not a collective (poll, atomic) may last."""

    def __init__(self, events, faults, checkpoint: dict, timeout_s: float):
        super().__init__(monitor="accuracy", fname=checkpoint["name"], every_epoch=False, with_opt=False)
        self.events, self.faults, self.timeout_s = events, faults, timeout_s
        self.keep_existing, self.early_saves, self.guard, self.node_local = (
            checkpoint[k] for k in ("keep_existing", "early_saves", "guard", "node_local"))
        self.best_state, self.save_ok = None, None

    # --- what a fix may change ---
    def write(self, data: bytes, last: bool):
        """How the writer puts the bytes on disk: fastai's save_model writes the final name in place."""
        self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
        with open(self.checkpoint, "wb") as f:
            self.faults.write(f, data, last)

    def sync(self) -> bool:
        """Between the save and the load; False: do not load."""
        return True

    def load_checkpoint(self):
        """Read the checkpoint into this rank's model (fastai's load_model, no foreign code)."""
        self.record_load_attempt()
        load_model(self.checkpoint, self.learn.model, None, with_opt=False, device=self.learn.dls.device,
                   weights_only=True)

    # --- the shared flow ---
    @property
    def checkpoint(self):
        return self.learn.path / self.learn.model_dir / f"{self.fname}.pth"

    def is_writer(self) -> bool:
        return rank_distrib() == 0  # fastai's notion, as save_model has it

    def before_fit(self):
        super().before_fit()
        if not self.keep_existing and local_rank() == 0:  # each node its own folder, where that is node-local
            self.remove_checkpoint()
        self.events.record("fit_start", train_batches=len(self.dls.train),
                           ddp=isinstance(self.learn.model, DistributedDataParallel),
                           node_local=self.node_local)

    def remove_checkpoint(self):
        if self.checkpoint.exists():  # unlink fails on a read-only filesystem even when nothing is there
            self.checkpoint.unlink(missing_ok=True)

    def after_epoch(self):
        values = self.recorder.values[-1]
        values[self.idx] = self.faults.shape_metric(values[self.idx], self.epoch)
        TrackerCallback.after_epoch(self)  # the monitored metric decides new_best
        if self.new_best:
            self.best_state = copy.deepcopy(get_model(self.learn.model).state_dict())
        last = self.epoch == self.n_epoch - 1
        if last:
            self.faults.before_last_save()
        if self._should_save(last):
            self.save_checkpoint(last)

    def _should_save(self, last: bool) -> bool:
        return last or (self.early_saves and self.new_best)

    def save_checkpoint(self, last: bool):
        """The writer saves the best model so far; a failed save is recorded and training goes on."""
        if not self.is_writer():
            return
        self.events.record("save_start", epoch=self.epoch, path=str(self.checkpoint))
        buffer = io.BytesIO()
        torch.save(self.best_state, buffer, pickle_protocol=2)  # what fastai's save_model writes
        try:
            self.write(buffer.getvalue(), last)
        except OSError as e:
            self.save_ok = False
            self.events.record("save_error", epoch=self.epoch, **error_fields(e))
            say(f"Save failed: {type(e).__name__}: {e}")
            return
        self.save_ok = True
        self.events.record("save_end", epoch=self.epoch, path=str(self.checkpoint),
                           digest=weights_digest(self.best_state), bytes=len(buffer.getvalue()))
        say("Model saved.")

    def after_fit(self, **kwargs):
        self.events.record("train_end")
        say("Attempting to load model.")  # as the seed printed it: before any sync
        if self.guard_allows("sync") and self.sync() and self.guard_allows("load"):
            self.faults.before_load()
            try:
                self.load_checkpoint()
            except SyncFailed:
                pass
            except Exception as e:
                self.events.record("load_error", **error_fields(e))
                say(f"Load failed: {type(e).__name__}: {e}")
            else:
                self.events.record("load_done", digest=model_digest(self.learn.model))
                say("Loaded model.")
        self.events.record("final", digest=model_digest(self.learn.model))

    def guard_allows(self, stage: str) -> bool:
        """checkpoint.guard: a local exists() check before the sync or before the load."""
        if self.guard != stage or self.checkpoint.exists():
            return True
        self.events.record("skip", reason=f"no checkpoint file when it looked (checkpoint.guard={stage})")
        say("No checkpoint file: not loading.")
        return False

    def record_load_attempt(self, **fields):
        size = self.checkpoint.stat().st_size if self.checkpoint.exists() else None
        self.events.record("load_attempt", path=str(self.checkpoint), bytes=size, **fields)

    def wait(self, how: str, until) -> bool:
        """Run `until()` between sync events (train/fixes.py); False if it failed."""
        return watched(self.events, how, until)


class UnsyncedSaveModelCallback(RaceSaveModelCallback):
    """fastai v1, the seed: nothing between rank 0's write and the others' reads."""


class BarrierSaveModelCallback(RaceSaveModelCallback):
    """fastai 2.8: Learner.load, whose distrib_barrier() comes before the read. fastai's own code runs;
    its barrier is only watched, so that the events show when each rank entered and left it."""

    def load_checkpoint(self):
        import fastai.learner

        barrier = fastai.learner.distrib_barrier

        def watched_barrier():
            if not self.wait("barrier", barrier):
                raise SyncFailed
            self.record_load_attempt()

        fastai.learner.distrib_barrier = watched_barrier
        try:
            self.learn.load(self.fname, with_opt=False, weights_only=True)
        finally:
            fastai.learner.distrib_barrier = barrier


class SaveOnEachNodeSaveModelCallback(BarrierSaveModelCallback):
    """Each node's local rank 0 writes a copy, then fastai's Learner.load with its barrier (transformers'
    save_on_each_node, #12421): every node's own disk holds the checkpoint."""

    def is_writer(self):
        return local_rank() == 0


class PollSaveModelCallback(RaceSaveModelCallback):
    """A naive fix: wait until the checkpoint exists, then load. It beats `missing`, but a file that
    exists is not a file that is finished (scenario=torn)."""

    def sync(self):
        return self.wait("file", lambda: wait_for_file(self.checkpoint, self.timeout_s))


class AtomicSaveModelCallback(PollSaveModelCallback):
    """Write a temporary file in the same folder, fsync it, then os.replace it onto the final name
    (Lightning#20011, Orbax). Readers wait for the final name, with no collective: none sees a
    partial file, but an older file under that name is taken for the new one (scenario=stale)."""

    def write(self, data: bytes, last: bool):
        atomic_write(self.checkpoint, lambda f: self.faults.write(f, data, last))


class AgreedSaveModelCallback(RaceSaveModelCallback):
    """Rank 0 decides and every rank takes the same branch (Lightning's reduce_boolean_decision, the
    fix of transformers#40923): rank 0's save result and its decision to load are broadcast, so no
    rank waits for a peer that went another way. A failed save: no rank loads, and all say why."""

    def guard_allows(self, stage):
        return True  # the agreed decision replaces every local check

    def sync(self):
        def decide():
            ok = self.save_ok is not False and self.checkpoint.exists()
            return ok, "" if ok else "rank 0's save failed" if self.save_ok is False else "rank 0 has no checkpoint"

        return agree(self.events, decide)


class BroadcastSaveModelCallback(RaceSaveModelCallback):
    """Only rank 0 reads the file; it sends the weights to the others with a collective, so no other
    rank touches the filesystem."""

    def load_checkpoint(self):
        def read():
            self.record_load_attempt()
            return torch.load(self.checkpoint, map_location="cpu", weights_only=True)

        get_model(self.learn.model).load_state_dict(broadcast_read(self.events, read))


class DcpSaveModelCallback(RaceSaveModelCallback):
    """torch.distributed.checkpoint: save and load are collectives, and `.metadata`, written last by
    the coordinator, is the commit point. Every rank takes part in each save."""

    @property
    def checkpoint(self):
        return self.learn.path / self.learn.model_dir / f"{self.fname}.dcp"

    def remove_checkpoint(self):
        import shutil
        shutil.rmtree(self.checkpoint, ignore_errors=True)

    def is_writer(self):
        return True

    def save_checkpoint(self, last):

        state = {"model": self.best_state}
        if dist.get_rank() == 0:
            self.events.record("save_start", epoch=self.epoch, path=str(self.checkpoint))
        try:
            dcp_save(state, self.checkpoint)
        except Exception as e:  # e.g. the coordinator cannot read a peer's part: no shared filesystem
            self.save_ok = False
            if dist.get_rank() == 0:
                self.events.record("save_error", epoch=self.epoch, **error_fields(e))
            say(f"Save failed: {type(e).__name__}: {e}")
            return
        if dist.get_rank() == 0:
            self.save_ok = True
            self.events.record("save_end", epoch=self.epoch, path=str(self.checkpoint),
                               digest=weights_digest(self.best_state), bytes=dir_size(self.checkpoint))
            say("Model saved.")

    def load_checkpoint(self):

        self.record_load_attempt()
        state = {"model": get_model(self.learn.model).state_dict()}
        dcp_load(state, self.checkpoint)  # its .metadata runs no foreign code; a failure is recorded, not fatal
        get_model(self.learn.model).load_state_dict(state["model"])


def dir_size(path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())

