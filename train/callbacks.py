"""The SaveModelCallback variants under test. They differ only in `sync()`: what
happens between the saving rank's last write and every rank's load.

The shared rules are the seed's: fastai's SaveModelCallback monitoring accuracy; the
last epoch always saves, after the skewed rank's stall (or, with skew.at=mid_write,
with the stall halfway through writing the file); a checkpoint left by an earlier run
is removed before training; every rank loads the checkpoint when fit ends. A failed
load is recorded, not raised, so that every rank is observed.
"""
import hashlib
import io
import os
import time
from datetime import datetime

import torch
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
    """events: this rank's EventLog; skew_*: who stalls the last save, how long, where;
    keep_existing / early_saves / crash_rank: as in configs/train.yaml; sync_timeout_s:
    how long a sync that waits by itself (poll) may wait."""

    def __init__(self, events, fname="best", skew_rank=0, skew_seconds=0.0, skew_at="before_save",
                 keep_existing=False, early_saves=False, crash_rank=None, sync_timeout_s=60.0):
        super().__init__(monitor="accuracy", fname=fname, every_epoch=False, with_opt=False)
        self.events, self.keep_existing, self.early_saves = events, keep_existing, early_saves
        self.skew_rank, self.skew_seconds, self.skew_at = skew_rank, skew_seconds, skew_at
        self.crash_rank, self.sync_timeout_s = crash_rank, sync_timeout_s

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
        if last and rank_distrib() == self.crash_rank:
            self.events.record("crash")
            say("Crashing on purpose (crash_rank).")
            os._exit(1)
        if last and self.skew_at == "before_save":
            self._skew()
        if last or (self.early_saves and self.new_best):
            self._save(self.fname)

    def _skew(self):
        if rank_distrib() == self.skew_rank and self.skew_seconds > 0:
            self.events.record("skew_start", seconds=self.skew_seconds)
            time.sleep(self.skew_seconds)
            self.events.record("skew_end")

    def _save(self, name):
        if rank_distrib() != 0:  # fastai's save_model writes on rank 0 only
            return
        self.events.record("save_start", epoch=self.epoch, path=str(self.checkpoint))
        if self.epoch == self.n_epoch - 1 and self.skew_at == "mid_write":
            self._write_with_a_stall()
        else:
            super()._save(name)
        self.events.record("save_end", epoch=self.epoch, path=str(self.checkpoint),
                           digest=weights_digest(self.learn.model), bytes=self.checkpoint.stat().st_size)
        say("Model saved.")

    def _write_with_a_stall(self):
        """What fastai's save_model writes, reaching the file in two halves with the skew
        between them: a filesystem that stalls mid-write."""
        buffer = io.BytesIO()
        torch.save(get_model(self.learn.model).state_dict(), buffer, pickle_protocol=2)
        data = buffer.getvalue()
        self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
        with open(self.checkpoint, "wb") as f:
            f.write(data[:len(data) // 2])
            f.flush()
            self._skew()
            f.write(data[len(data) // 2:])

    def after_fit(self, **kwargs):
        self.events.record("train_end")
        say("Attempting to load model.")  # as the seed printed it: before any sync
        if self.sync():
            self._load()

    def _load(self):
        size = self.checkpoint.stat().st_size if self.checkpoint.exists() else None
        self.events.record("load_attempt", path=str(self.checkpoint), bytes=size)
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


class PollSaveModelCallback(RaceSaveModelCallback):
    """A naive fix: wait until the checkpoint exists, then load. It beats `missing`, but a
    file that exists is not a file that is finished (try skew.at=mid_write)."""

    def sync(self):
        self.events.record("poll_enter")
        deadline = time.monotonic() + self.sync_timeout_s
        while not self.checkpoint.exists():
            if time.monotonic() > deadline:
                self.events.record("poll_timeout", seconds=self.sync_timeout_s)
                say(f"No checkpoint after {self.sync_timeout_s} s.")
                return False
            time.sleep(0.05)
        self.events.record("poll_exit")
        return True
