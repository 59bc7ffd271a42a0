"""rank0_leads for PyTorch Lightning (2.x, DDP): rank 0 decides and reads, every rank follows it.

A file to copy into your project. It needs pytorch_lightning, torch and the standard library only; with the
`lightning` package, import TorchCheckpointIO from lightning.pytorch.plugins instead.

What it does:
- Saves (rank 0, which is where Lightning's DDPStrategy saves) go to a temporary name in the checkpoint's own
  folder, are fsynced, then renamed onto the name: a checkpoint is under its name whole or not at all, on any
  filesystem. A save that fails (a full disk, ENOSPC) is remembered, not raised, so that no rank is left waiting in
  Lightning's barrier after the save for a rank 0 that left.
- Loads (every rank calls load_checkpoint): rank 0 alone decides and reads. It does not load a checkpoint whose
  save failed, nor one it cannot find or read; otherwise it reads it (weights_only=True: no code from the file
  runs) and sends its decision and the checkpoint to every rank with torch.distributed.broadcast_object_list. So
  no other rank touches the filesystem: node-local disks and stale or half-written files cannot reach it. When
  rank 0 decides not to load, every rank raises the same NotLoaded, so every rank goes the same way.
- Resume: rank0_last_checkpoint(folder) is Lightning's ckpt_path="last" with rank 0 choosing: the newest
  last*.ckpt by modification time that is a whole file (its zip CRCs check), on rank 0's listing, sent to every
  rank. Every rank then resumes from that same file (None: every rank starts from scratch).
- Deletes: only rank 0 deletes (Lightning already calls remove_checkpoint on rank 0 only; this keeps it so).

Use (under torchrun or a cluster launcher, with the DDP strategy):

    from rank0_leads import NotLoaded, Rank0LeadsCheckpointIO, rank0_last_checkpoint

    trainer = pl.Trainer(strategy="ddp", plugins=[Rank0LeadsCheckpointIO()],
                         callbacks=[ModelCheckpoint(dirpath=folder, save_last=True)], ...)
    # the load at the end:
    trainer.fit(model, train_dl, valid_dl)
    try:
        trainer.validate(model, valid_dl, ckpt_path="best")
    except NotLoaded as e:       # raised on every rank alike: every rank keeps its (same) weights
        print(f"best checkpoint not loaded: {e}")
    # or the resume after a restart (it makes the process group if there is none yet; Lightning then uses it):
    trainer.fit(model, train_dl, ckpt_path=rank0_last_checkpoint(folder))

Races it holds (race-lab's scenarios): a rank that reads before rank 0's save has ended (seed), an older file
under the name (stale), a half-written file (torn), ranks that check for the file on their own (skip_if_missing,
disagree), a failed save (save_fails: every rank says so and keeps the same weights), each node its own disk
(no_shared_fs), a kill in the middle of a save (crash_mid_save, pointer_first), rotation (cleanup: rank 0 alone
deletes) and ranks that list the folder differently after a restart (resume_disagree).
The whole checkpoint travels through the process group: for a model far larger than a host's memory, use a
sharded checkpoint (torch.distributed.checkpoint) instead.
"""
import os
import re
import zipfile

import torch.distributed as dist
from pytorch_lightning.plugins import TorchCheckpointIO

LAST = re.compile(r"^last(-v?\d+)?\.ckpt$")  # ModelCheckpoint's last checkpoint and its versions (last-v1.ckpt)


class NotLoaded(Exception):
    """Rank 0 decided that no rank loads the checkpoint (the message says why); raised on every rank alike."""


class Rank0LeadsCheckpointIO(TorchCheckpointIO):
    """Lightning's TorchCheckpointIO where each save reaches its name whole, a failed save is remembered instead
    of raised, rank 0 alone decides whether to load and reads, and every rank gets rank 0's decision and checkpoint."""

    def __init__(self):
        super().__init__()
        self.failed = {}  # on rank 0: path -> why its last save failed

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        path = os.path.abspath(path)
        folder, name = os.path.split(path)
        partial = os.path.join(folder, f".{name}.partial")
        try:
            super().save_checkpoint(checkpoint, partial, storage_options)  # Lightning's own write, to a temporary name
            flush(partial)
            os.replace(partial, path)  # the name appears whole, or not at all
            flush(folder)
        except OSError as e:
            self.failed[path] = f"{type(e).__name__}: {e}"
            if os.path.exists(partial):
                os.remove(partial)
            return
        self.failed.pop(path, None)

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        """Every rank: rank 0 decides and reads (weights_only=True, onto the CPU); the others receive."""
        box = [self.decide_and_read(os.path.abspath(path)) if rank() == 0 else None]
        self.broadcast(box)
        if "why_not" in box[0]:
            raise NotLoaded(box[0]["why_not"])
        return box[0]["checkpoint"]

    def decide_and_read(self, path: str) -> dict:
        """On rank 0: {"checkpoint": ...}, or {"why_not": ...} when no rank is to load."""
        if path in self.failed:
            return {"why_not": f"rank 0's save failed ({self.failed[path]}): {os.path.basename(path)} is not whole"}
        try:
            return {"checkpoint": super().load_checkpoint(path, map_location="cpu", weights_only=True)}
        except Exception as e:  # noqa: BLE001 (whatever the read raised, every rank is told the same)
            return {"why_not": f"rank 0 could not read {os.path.basename(path)} ({type(e).__name__}: {e})"}

    def broadcast(self, box: list):
        """Rank 0's box[0] to every rank: this class's one collective (a subclass may observe it here)."""
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.broadcast_object_list(box, src=0)

    def remove_checkpoint(self, path):
        if rank() == 0:
            super().remove_checkpoint(path)


def rank0_last_checkpoint(folder, backend: str = "gloo"):
    """For trainer.fit(ckpt_path=...): the checkpoint to resume from, chosen by rank 0 and the same on every rank
    (None: a fresh start everywhere). backend: the process group's, made here if there is none yet (use "nccl"
    on GPUs); Lightning takes the group that exists."""
    if not (dist.is_available() and dist.is_initialized()) and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group(backend)
    box = [newest_whole_last(os.fspath(folder)) if rank() == 0 else None]
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(box, src=0)
    return box[0]


def newest_whole_last(folder: str):
    """Lightning's rule for ckpt_path="last" (the newest last*.ckpt by modification time), skipping any file that is
    not whole: a torn or cut-short file fails its zip CRC check (torch.save writes a zip archive)."""
    try:
        names = [n for n in os.listdir(folder) if LAST.match(n)]
    except FileNotFoundError:
        return None
    paths = [os.path.join(folder, n) for n in names if os.path.exists(os.path.join(folder, n))]
    for path in sorted(paths, key=lambda p: os.stat(p).st_mtime, reverse=True):
        if whole(path):
            return path
    return None


def whole(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None
    except (OSError, zipfile.BadZipFile):
        return False


def flush(path: str):
    """fsync a file or a folder, so that what was written or renamed survives a crash of the machine."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
