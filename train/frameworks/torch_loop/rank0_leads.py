"""Rank0Checkpoints: save and resume for a plain torch DDP training loop, with rank 0 leading.
Copy this file into your project: it imports only torch and the standard library.

What it does
  save(epoch, state), on every rank after each epoch: rank 0 alone writes <folder>/epoch<k>.pt through a temporary
  file that is fsynced and renamed onto that name, then writes the marker epoch<k>.pt.complete (the file's sha256)
  the same way, and with pointer=True the `latest` pointer after it; then a barrier; then, with keep_last, rank 0
  alone deletes all but the newest keep_last checkpoints (each marker before its file).
  resume(), on every rank at the start of every attempt: rank 0 alone picks the newest COMPLETE checkpoint (the one
  `latest` names if it is complete, else the newest whose bytes match its marker), reads it (weights_only=True) and
  sends it to every rank with broadcast_object_list; every rank returns the same state (None: start fresh).

Races it holds (race-lab's resume scenarios, each run 5/5 clean):
  crash_mid_save   a rank killed halfway through a save leaves no file under a checkpoint's name, and no marker
  pointer_first    `latest` is written after the checkpoint and its marker, and is trusted only if complete
  cleanup          one rank deletes old checkpoints, after a barrier: no two ranks delete the same file
  resume_disagree  no rank resumes from a listing of its own: every rank takes rank 0's pick

Use (after torch.distributed.init_process_group; model wrapped in DDP, state saved from model.module):
    from rank0_leads import Rank0Checkpoints
    checkpoints = Rank0Checkpoints("checkpoints", keep_last=2)
    start, state = 0, checkpoints.resume()
    if state is not None:
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    for epoch in range(start, epochs):
        train_one_epoch(model, optimizer)
        checkpoints.save(epoch, {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                                 "epoch": epoch})
  Every rank must call save and resume (they are collectives). The state must be what torch.load reads with
  weights_only=True (tensors, numbers, strings, lists, dicts). The small methods below (write_bytes, read,
  broadcast, barrier, delete) are the places to put your own storage or logging.
"""
import hashlib
import io
import json
import os
import re
from pathlib import Path

import torch
import torch.distributed as dist

POINTER = "latest"


def is_rank0() -> bool:
    """The process group's rank is 0 (or there is no group): environment variables can be wrong, the group is not."""
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def marker_of(path: Path) -> Path:
    return path.with_name(path.name + ".complete")


class Rank0Checkpoints:
    """Checkpoints epoch<k>.pt in `folder`; keep_last: how many to keep (0: all); pointer: keep a `latest` file."""

    def __init__(self, folder, keep_last: int = 0, pointer: bool = False):
        self.folder, self.keep_last, self.pointer = Path(folder), keep_last, pointer
        self.resumed_from = None  # the checkpoint resume() returned (rank 0's pick), or None

    def path_of(self, epoch: int) -> Path:
        return self.folder / f"epoch{epoch}.pt"

    def checkpoints(self) -> list:
        """The checkpoint files in the folder, oldest first, by epoch number (a temporary file is not one)."""
        if not self.folder.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.folder.iterdir() if (m := re.match(r"^epoch(\d+)\.pt$", p.name))]
        return [p for _, p in sorted(found)]

    def is_complete(self, path: Path) -> bool:
        """Its marker is there and names the sha256 of its bytes."""
        try:
            record = json.loads(marker_of(path).read_text())
            return hashlib.sha256(path.read_bytes()).hexdigest() == record["sha256"]
        except (OSError, ValueError, KeyError, TypeError):
            return False

    # --- resume: rank 0 picks and reads, every rank gets its state ---
    def resume(self):
        """Every rank: the state of rank 0's newest complete checkpoint, or None (start fresh)."""
        picked = self.pick() if is_rank0() else None
        picked = self.broadcast(picked)
        self.resumed_from = picked["path"]
        return picked["state"]

    def pick(self) -> dict:
        """Rank 0: the newest complete checkpoint it can read: the pointer's first, then the listing, newest first."""
        candidates = [p for p in reversed(self.checkpoints()) if self.is_complete(p)]
        named = self.folder / POINTER
        if self.pointer and named.is_file():
            latest = self.folder / named.read_text().strip()
            if latest in candidates:
                candidates.remove(latest)
                candidates.insert(0, latest)
        for path in candidates:
            try:
                return {"path": str(path), "state": self.read(path)}
            except Exception as e:  # noqa: BLE001  complete when checked, unreadable now: the next older one
                print(f"Not resuming from {path}: {type(e).__name__}: {e}")
        return {"path": None, "state": None}

    def read(self, path: Path):
        return torch.load(path, map_location="cpu", weights_only=True)

    def broadcast(self, obj):
        """Rank 0's object, on every rank."""
        if not (dist.is_available() and dist.is_initialized()):
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    # --- save: rank 0 writes whole files, the marker last; a barrier; rank 0 rotates ---
    def save(self, epoch: int, state: dict):
        """Every rank: rank 0 writes epoch<epoch>.pt (its marker and pointer after it), all meet, rank 0 rotates."""
        if is_rank0():
            self.write_checkpoint(self.path_of(epoch), state)
        self.barrier()
        if self.keep_last and is_rank0():
            for old in self.checkpoints()[:-self.keep_last]:
                self.delete(old)

    def write_checkpoint(self, path: Path, state: dict):
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = buffer.getvalue()
        self.write_whole(path, lambda f: self.write_bytes(f, data))
        marker = json.dumps({"sha256": hashlib.sha256(data).hexdigest()}).encode()
        self.write_whole(marker_of(path), lambda f: f.write(marker))  # the commit point: after the whole file
        if self.pointer:
            self.write_whole(self.folder / POINTER, lambda f: f.write(path.name.encode()))  # and the pointer last

    def write_whole(self, path: Path, fill):
        """`fill(f)` writes a temporary file beside `path`, which is fsynced and renamed onto it; the folder fsynced."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            with open(tmp, "wb") as f:
                fill(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)

    def write_bytes(self, f, data: bytes):
        f.write(data)

    def barrier(self):
        if dist.is_available() and dist.is_initialized():
            dist.barrier()

    def delete(self, path: Path):
        """The marker first: a checkpoint half deleted never reads as complete."""
        marker_of(path).unlink(missing_ok=True)
        path.unlink()
