"""A resume helper for Ray Train (TorchTrainer, ray.train.report): copy this file into your project.

Ray Train's workers each upload their part of a checkpoint into one folder on storage, and Ray's controller records
the checkpoint once every worker reported. A worker that dies inside its upload leaves a folder that holds only
its peers' parts; Ray's own resume (ray.train.get_checkpoint) skips it, but the folder stays on storage, the newest
there, and num_to_keep never deletes it: a resume from the newest folder (after the driver died, or in a new run)
loads a checkpoint missing a worker's part. This helper makes a folder count only once it is whole:

- every worker reports into the folder rank 0 named, then a barrier (every worker's part is on storage), then rank 0
  writes the marker `.complete` into it (a temporary name, fsync, rename): the marker is the commit point;
- at every start, rank 0 alone lists the folders and picks the newest with its marker, and sends its name to every
  worker (torch.distributed.broadcast_object_list): no worker resumes from a listing of its own.

Use it in your train function, with `folder` your RunConfig's storage_path/name on a filesystem every worker shares:

    checkpoints = Rank0Checkpoints(folder)
    name = checkpoints.newest()                      # every worker; None: start fresh
    if name: state = torch.load(Path(folder) / name / f"rank_{rank}.pt", weights_only=True)
    ...
    checkpoints.report(metrics, ray.train.Checkpoint.from_directory(tmp))   # in place of ray.train.report

Both are collectives: call them on every worker. Built on Ray Train's and torch's public API and the standard library.
"""
import os
import time
import uuid
from pathlib import Path

import ray.train
import torch.distributed as dist

MARKER = ".complete"  # in a checkpoint folder: every worker's part is there
PREFIX = "checkpoint_"


class Rank0Checkpoints:
    def __init__(self, folder):
        self.folder = Path(folder)

    def report(self, metrics: dict, checkpoint):
        """ray.train.report into a folder rank 0 names, then a barrier, then rank 0 commits it with the marker."""
        name = self.broadcast(f"{PREFIX}{time.strftime('%Y-%m-%d_%H-%M-%S')}_{uuid.uuid4().hex[:8]}"
                              if dist.get_rank() == 0 else None)
        ray.train.report(metrics, checkpoint=checkpoint, checkpoint_dir_name=name)
        self.barrier()  # every worker's report returned: its part is on storage
        if dist.get_rank() == 0:
            self.write_marker(self.folder / name)

    def newest(self):
        """The name of the newest folder with its marker, as rank 0 finds it, on every worker (None: none)."""
        return self.broadcast(self.pick() if dist.get_rank() == 0 else None)

    def pick(self):
        whole = [p.name for p in self.folders() if (p / MARKER).is_file()]
        return whole[-1] if whole else None

    def folders(self) -> list:
        """The checkpoint folders on storage, oldest first (their names begin with the time they were made)."""
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if p.is_dir() and p.name.startswith(PREFIX))

    def write_marker(self, path: Path):
        temporary = path / f"{MARKER}.{os.getpid()}.tmp"
        with open(temporary, "w") as f:
            f.write(path.name)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path / MARKER)

    def broadcast(self, obj):
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self):
        dist.barrier()
