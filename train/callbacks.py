"""The SaveModelCallback variants under test. They differ only in `sync()`: what
happens between the saving rank's last write and every rank's load.

The shared rules are the seed's: fastai's SaveModelCallback monitoring accuracy,
the last epoch always saves (after the skewed rank's sleep), a checkpoint left by
an earlier run is removed before training, and every rank loads the checkpoint
when fit ends. A failed load is recorded, not raised, so every rank is observed.
"""
import hashlib
import os
import time
from datetime import datetime

from fastai.callback.tracker import SaveModelCallback, TrackerCallback
from fastai.learner import load_model
from fastai.torch_core import distrib_barrier, get_model, rank_distrib
from torch.nn.parallel import DistributedDataParallel


def weights_digest(model) -> str:
    """A short hash of the model's weights, to tell which checkpoint a rank holds."""
    h = hashlib.sha256()
    for name, tensor in get_model(model).state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def error_fields(e: BaseException) -> dict:
    message = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    return {"error_type": type(e).__name__, "message": message}


def say(text):
    """A console line with the time, like the seed's log."""
    print(f"{datetime.now():%H:%M:%S.%f}"[:-3] + f" rank {rank_distrib()}: {text}", flush=True)


class RaceSaveModelCallback(SaveModelCallback):
    def __init__(self, events, fname="best", skew_rank=0, skew_seconds=0.0, keep_existing=False,
                 early_saves=False, crash_rank=None):
        super().__init__(monitor="accuracy", fname=fname, every_epoch=False, with_opt=False)
        self.events, self.keep_existing, self.early_saves = events, keep_existing, early_saves
        self.skew_rank, self.skew_seconds, self.crash_rank = skew_rank, skew_seconds, crash_rank

    @property
    def checkpoint(self):
        return self.learn.path / self.learn.model_dir / f"{self.fname}.pth"

    def sync(self) -> bool:
        """Run between the last save and the load; False means: do not load."""
        raise NotImplementedError

    def before_fit(self):
        super().before_fit()
        if not self.keep_existing and rank_distrib() == 0:
            self.checkpoint.unlink(missing_ok=True)
        self.events.record("fit_start", train_batches=len(self.dls.train),
                           ddp=isinstance(self.learn.model, DistributedDataParallel))

    def after_epoch(self):
        TrackerCallback.after_epoch(self)  # the monitored metric decides new_best
        last = self.epoch == self.n_epoch - 1
        if last:
            self._before_last_save()
        if last or (self.early_saves and self.new_best):
            self._save(self.fname)

    def _before_last_save(self):
        me = rank_distrib()
        if me == self.crash_rank:
            self.events.record("crash")
            say("Crashing on purpose (crash_rank).")
            os._exit(1)
        if me == self.skew_rank and self.skew_seconds > 0:
            self.events.record("skew_start", seconds=self.skew_seconds)
            time.sleep(self.skew_seconds)
            self.events.record("skew_end")

    def _save(self, name):
        if rank_distrib() != 0:  # fastai's save_model writes on rank 0 only
            return
        self.events.record("save_start", epoch=self.epoch, path=str(self.checkpoint))
        super()._save(name)
        self.events.record("save_end", epoch=self.epoch, path=str(self.checkpoint),
                           digest=weights_digest(self.learn.model), bytes=self.checkpoint.stat().st_size)
        say("Model saved.")

    def after_fit(self, **kwargs):
        self.events.record("train_end")
        say("Attempting to load model.")  # as the seed printed it: before any sync
        if self.sync():
            self._load()

    def _load(self):
        self.events.record("load_attempt", path=str(self.checkpoint))
        try:
            load_model(self.checkpoint, self.learn.model, self.learn.opt, with_opt=False,
                       device=self.learn.dls.device, weights_only=False)
        except Exception as e:
            self.events.record("load_error", **error_fields(e))
            say(f"Load failed: {type(e).__name__}: {e}")
            return
        self.events.record("load_done", digest=weights_digest(self.learn.model))
        say("Loaded model.")


class UnsyncedSaveModelCallback(RaceSaveModelCallback):
    """fastai v1, the seed: nothing between rank 0's write and the others' reads."""

    def sync(self):
        return True


class BarrierSaveModelCallback(RaceSaveModelCallback):
    """fastai 2.8: distrib_barrier() before the load, as Learner.load does."""

    def sync(self):
        self.events.record("barrier_enter")
        try:
            distrib_barrier()
        except Exception as e:
            timed_out = "timed out" in str(e).lower() or "timeout" in type(e).__name__.lower()
            self.events.record("barrier_error", timed_out=timed_out, **error_fields(e))
            say(f"Barrier failed: {type(e).__name__}: {e}")
            return False
        self.events.record("barrier_exit")
        return True
