"""fix=rank0_leads for the resume loop: the helper users copy (rank0_leads.py, torch's public API only) under
race-lab's observation. This subclasses it and observes it at its own small methods, calling them through super():
its write (save_start, save_end, and the scenario's SIGKILL halfway through the bytes or right after the save:
faults.resume_write, faults.kill_point), its listing (faults.listing: a stale listing, though only rank 0 lists),
its read (load_attempt), its broadcast and barrier (watched as any sync), and its deletes (rotate, rotate_error).
The loop (resume.py) calls its resume() and save() in place of its own."""
from pathlib import Path

import torch.distributed as dist

from train.fixes import SyncFailed, watched
from train.frameworks.torch_loop.rank0_leads import Rank0Checkpoints
from train.toolkit.errors import error_fields
from train.toolkit.model import weights_digest
from train.toolkit.rank import say


class ObservedRank0Checkpoints(Rank0Checkpoints):
    def __init__(self, folder, keep_last: int, pointer: bool, events, faults):
        super().__init__(folder, keep_last=keep_last, pointer=pointer)
        self.events, self.faults = events, faults
        self.listed, self.saving = [], None  # the names rank 0 listed at its resume; (epoch, path) being written

    def checkpoints(self):
        listed = self.faults.listing(super().checkpoints())
        self.listed = [p.name for p in listed]
        return listed

    def read(self, path):
        self.events.record("load_attempt", path=str(path), bytes=Path(path).stat().st_size)
        return super().read(path)

    def broadcast(self, obj):
        box = []
        if not watched(self.events, "agree", lambda: box.append(super(ObservedRank0Checkpoints, self).broadcast(obj))):
            raise SyncFailed
        return box[0]

    def barrier(self):
        if not watched(self.events, "barrier", dist.barrier):
            raise SyncFailed

    def write_checkpoint(self, path, state):
        epoch, step = state["epoch"], state["step"]
        self.events.record("save_start", epoch=epoch, step=step, path=str(path))
        self.saving = (epoch, path)
        super().write_checkpoint(path, state)
        self.events.record("save_end", epoch=epoch, step=step, path=str(path), digest=weights_digest(state["model"]),
                           bytes=path.stat().st_size)
        self.faults.kill_point("after_save", epoch, path)

    def write_bytes(self, f, data):
        epoch, path = self.saving
        self.faults.resume_write(f, data, epoch, path)

    def delete(self, path):
        try:
            super().delete(path)
        except OSError as e:
            self.events.record("rotate_error", path=str(path), **error_fields(e))
            say(f"Deleting {path.name} failed: {type(e).__name__}: {e}")
            e.race_lab = "rotate_error"  # recorded already: not a train_error too
            raise
        self.events.record("rotate", path=str(path))
