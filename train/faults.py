"""What goes wrong, placed on purpose: every fault a scenario can ask for, at a named point.

The callbacks (train/callbacks.py) call these points on the shared save/load path and never
decide a fault themselves. A point acts on the *real* rank (the process group's), which a
misdetected rank (fault.misdetect_rank) does not change.

  shape_metric     the monitored value after each epoch (fault.best_epoch)
  before_last_save a crash, the skew's stall, a misdetected rank
  write            the bytes of a checkpoint reach the file: a stall or an OSError halfway
  before_load      a reader's pause at the start of its load (fault.read_delay_s)
"""
import errno
import os
import time

import torch.distributed as dist


class Faults:
    def __init__(self, cfg: dict, events, say):
        """cfg: the run's config; events: this rank's EventLog; say: a console line."""
        self.skew, self.fault, self.epochs = cfg["skew"], cfg["fault"], cfg["epochs"]
        self.events, self.say = events, say

    @property
    def rank(self) -> int:
        return dist.get_rank()

    def shape_metric(self, value: float, epoch: int) -> float:
        """With best_epoch set, a value that rises until that epoch and falls after it."""
        best = self.fault["best_epoch"]
        if best is None:
            return value
        return -abs(epoch - (best if best >= 0 else self.epochs + best))

    def before_last_save(self):
        if self.rank == self.fault["crash_rank"]:
            self.events.record("crash")
            self.say("Crashing on purpose (fault.crash_rank).")
            os._exit(1)
        if self.fault["misdetect_rank"]:  # what a launch that sets neither looks like to fastai
            os.environ["RANK"] = "0"
            os.environ.pop("WORLD_SIZE", None)
            self.events.record("rank_misdetected")
        if self.rank == self.skew["rank"] and self.skew["seconds"] > 0:
            self._stall("skew", self.skew["seconds"])

    def write(self, f, data: bytes, last: bool):
        """Write a checkpoint's bytes into the open file f, in two halves. On rank 0's last save the
        scenario may stall between them (a filesystem that hangs) or fail there (a full disk)."""
        half = len(data) // 2
        f.write(data[:half])
        f.flush()
        if last and self.rank == 0:
            if self.skew["mid_write_s"] > 0:
                self._stall("skew", self.skew["mid_write_s"], at="mid_write")
            if self.fault["save_error"]:
                code = getattr(errno, self.fault["save_error"])
                raise OSError(code, os.strerror(code))  # as a full disk fails write()
        f.write(data[half:])

    def before_load(self):
        if self.rank != 0 and self.fault["read_delay_s"] > 0:
            self._stall("read_delay", self.fault["read_delay_s"])

    def _stall(self, name, seconds, **fields):
        self.events.record(f"{name}_start", seconds=seconds, **fields)
        time.sleep(seconds)
        self.events.record(f"{name}_end")


def describe(cfg: dict) -> str:
    """In words, what this run's scenario injects: who stalls, where, how long, and what else. For the
    header of every run (the launcher's); pure, over the config."""
    skew, fault, ckpt, parts = cfg["skew"], cfg["fault"], cfg["checkpoint"], []
    if fault["crash_rank"] is not None:
        parts.append(f"rank {fault['crash_rank']} dies where its last save would start")
    if fault["misdetect_rank"]:
        parts.append("at the last save every process believes it is rank 0 (RANK and WORLD_SIZE unset), so all write")
    if skew["seconds"] > 0:
        parts.append(f"rank {skew['rank']} stalls {skew['seconds']:g} s right before its last save")
    if skew["mid_write_s"] > 0:
        parts.append(f"rank 0 stalls {skew['mid_write_s']:g} s halfway through writing the last checkpoint")
    if fault["save_error"]:
        code = getattr(errno, fault["save_error"])
        parts.append(f"rank 0's last save fails halfway with OSError {fault['save_error']} ({os.strerror(code)})")
    if fault["read_delay_s"] > 0:
        parts.append(f"every rank but rank 0 pauses {fault['read_delay_s']:g} s before it loads")
    if ckpt["early_saves"]:
        parts.append("every improvement before the last epoch is saved too, so an older checkpoint is there to read")
    if ckpt["keep_existing"]:
        parts.append("a checkpoint left in checkpoint.dir by an earlier run is kept")
    if fault["best_epoch"] is not None:
        best = "the last epoch" if fault["best_epoch"] == -1 else f"epoch {fault['best_epoch']}"
        parts.append(f"the monitored metric is shaped so {best} is the best")
    if ckpt["guard"] != "none":
        parts.append(f"each rank checks on its own whether the file exists before its {ckpt['guard']} "
                     "and skips it if not")
    if ckpt["node_local"]:
        parts.append("each node keeps its checkpoints on its own disk (no shared filesystem)")
    return "; ".join(parts) or "nothing: no stall, no fault"
