"""Save and resume for a plain torch DDP loop, as many loops write them: the interface of
docs/fixes/torch_loop.md's Rank0Checkpoints (built with the folder; save(epoch, state) and resume() on every rank).

EveryRankCheckpoints races: rank 0 torch.saves epoch<k>.pt in place (a crash halfway leaves a torn file under the
name), every rank deletes the old ones (two ranks delete one file), and every rank lists the folder and torch.loads
the newest name itself (a stale listing sends the ranks to different epochs). LeadingCheckpoints is the same
interface with those three fixed (keep_last: how many checkpoints to keep, 0: all): a temporary file renamed into place after an fsync, rank 0 alone deletes after a
barrier, and rank 0 alone picks and reads, then broadcasts the state. Run either with:

    race-lab check framework=torch_loop fix=own fix._target_=my_checkpoints.loop_checkpoints.EveryRankCheckpoints
"""
import os
import re
from pathlib import Path

import torch
import torch.distributed as dist


class EveryRankCheckpoints:
    def __init__(self, folder, keep_last: int = 0):
        self.folder, self.keep_last = Path(folder), keep_last

    def checkpoints(self) -> list:
        found = [(int(m.group(1)), p) for p in self.folder.iterdir() if (m := re.match(r"^epoch(\d+)\.pt$", p.name))]
        return [p for _, p in sorted(found)]

    def save(self, epoch: int, state: dict):
        if dist.get_rank() == 0:
            torch.save(state, self.folder / f"epoch{epoch}.pt")
        dist.barrier()
        if self.keep_last:
            for old in self.checkpoints()[:-self.keep_last]:
                old.unlink()

    def resume(self):
        found = self.checkpoints()
        return torch.load(found[-1], weights_only=True) if found else None


class LeadingCheckpoints(EveryRankCheckpoints):
    def save(self, epoch: int, state: dict):
        if dist.get_rank() == 0:
            path = self.folder / f"epoch{epoch}.pt"
            tmp = path.with_name(f".{path.name}.tmp")
            with open(tmp, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        dist.barrier()
        if self.keep_last and dist.get_rank() == 0:
            for old in self.checkpoints()[:-self.keep_last]:
                old.unlink()

    def resume(self):
        box = [super().resume() if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]
