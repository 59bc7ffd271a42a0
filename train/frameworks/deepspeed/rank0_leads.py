"""Rank0LeadsCheckpoints: save and resume for a DeepSpeed training loop, with rank 0 leading.
Copy this file into your project: it imports only torch and the standard library (the engine is yours).

What it does
  save(engine, epoch), on every rank after each epoch: engine.save_checkpoint(folder, tag, client_state={"epoch":
  epoch}, save_latest=False): every rank writes its part of global_step<N>/ and DeepSpeed writes no `latest` (it
  writes it without waiting for the other ranks' parts); a barrier: every rank's part is written; then rank 0 alone
  writes the marker complete.json ({"run": run_id, "tag": tag}) to a temporary file, fsyncs it and renames it into
  place; a barrier.
  resume(engine), on every rank at the start of every attempt: rank 0 reads the marker and sends its tag when this
  run wrote it (a checkpoint an older run left in the folder is never resumed from); every rank checks that its disk
  holds the tag's model file and its own ZeRO partition, and an all-reduce MIN agrees; then every rank loads that
  tag (engine.load_checkpoint(folder, tag=tag)) and returns its client state, or every rank returns None (start
  fresh).

Races it holds (race-lab's DeepSpeed scenarios, 5 of 5 at ZeRO-1; shard_lost at ZeRO-3 too):
  shard_lost      a rank killed before its partition lands: the marker is written only once every rank's part is
  crash_mid_save  rank 0 killed halfway through the model file: the marker still names the checkpoint before
  stale_tag       an older run's checkpoint and marker in the folder: its run id is not this run's
On node-local disks (node_local_resume) no tag is whole on every rank's disk, so every rank starts fresh: they
agree, but the training is redone. There, DeepSpeed's own checkpoint.use_node_local_storage writes the model file
on each node's disk.

Use (after deepspeed.initialize):
    checkpoints = Rank0LeadsCheckpoints("checkpoints")
    client, start = checkpoints.resume(engine), 0
    if client is not None:
        start = client["epoch"] + 1
    for epoch in range(start, epochs):
        train_one_epoch(engine)
        checkpoints.save(engine, epoch)
  Every rank must call save and resume (they are collectives). run_id names this training run: its default is
  torchrun's TORCHELASTIC_RUN_ID (--rdzv-id), the same in every restart of one launch; give each run its own.
"""
import json
import os
import re
from pathlib import Path

import torch
import torch.distributed as dist

MARKER = "complete.json"
MODEL = re.compile(r"^(zero_pp_rank_(\d+)_)?mp_rank_00_model_states\.pt$")  # ZeRO-3: each rank's part of it


class Rank0LeadsCheckpoints:
    """DeepSpeed checkpoints global_step<N>/ in `folder`, each trusted only once rank 0's marker names it."""

    def __init__(self, folder, run_id=None):
        self.folder = Path(folder)
        self.run_id = os.environ.get("TORCHELASTIC_RUN_ID", "") if run_id is None else str(run_id)

    def save(self, engine, epoch: int):
        tag = f"global_step{engine.global_steps}"
        engine.save_checkpoint(str(self.folder), tag=tag, client_state={"epoch": epoch}, save_latest=False)
        dist.barrier()  # every rank's part of `tag` is written
        if dist.get_rank() == 0:
            self.write_marker({"run": self.run_id, "tag": tag})
        dist.barrier()

    def resume(self, engine):
        """The client state of the checkpoint the marker names, loaded on every rank; None on every rank if there
        is none of this run or a rank's disk does not hold it whole."""
        tag = [self.marked_tag() if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(tag, src=0)
        if tag[0] is None:
            return None
        whole = torch.tensor([1 if self.holds(tag[0]) else 0])
        dist.all_reduce(whole, op=dist.ReduceOp.MIN)
        if not whole.item():
            return None
        _, client = engine.load_checkpoint(str(self.folder), tag=tag[0])
        return client

    def marked_tag(self):
        """The tag the marker names if this run wrote it, else None (no marker, unreadable, another run's)."""
        try:
            record = json.loads((self.folder / MARKER).read_text())
        except (OSError, ValueError):
            return None
        return record.get("tag") if isinstance(record, dict) and record.get("run") == self.run_id else None

    def holds(self, tag: str) -> bool:
        """This rank's disk holds what it reads of `tag`: the model file (ZeRO-3: its own part) and its partition."""
        me, folder = dist.get_rank(), self.folder / tag
        names = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        models = [m for name in names if (m := MODEL.match(name))]
        model = any(m.group(2) is None or int(m.group(2)) == me for m in models)
        return model and f"zero_pp_rank_{me}_mp_rank_00_optim_states.pt" in names

    def write_marker(self, record: dict):
        """Written to a temporary file, fsynced, renamed onto the marker: it is never read half written."""
        self.folder.mkdir(parents=True, exist_ok=True)
        temporary = self.folder / f".{MARKER}.tmp"
        with open(temporary, "w") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.folder / MARKER)
        directory = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
