"""Rank0Leads: Accelerator.save_state / load_state with rank 0 leading every checkpoint decision. Copy this file into
your project; it needs only accelerate, safetensors, torch and the standard library.

What it does, around Accelerate's own calls (1.x, DDP or a single process):
  save(output_dir=None)   Accelerator.save_state(output_dir) on every rank, as the docs show, with the differences:
                          the folder's old marker is removed first; an OSError on this process (a full disk, a dead
                          mount) is kept and returned as False, not raised, and training goes on; then every rank
                          waits for the others (wait_for_everyone) and the writer writes `rank0_leads.complete`,
                          last: the sha256 of every file in the folder. A folder without a matching marker (a save
                          that failed or was killed halfway) is never read.
  load_best(input_dir)    the load at the end: rank 0 alone decides and reads. When one of its saves failed, or the
                          folder is not complete, it decides not to load (a failed save is said on every rank, not
                          hidden behind an older checkpoint); else it reads the model's model.safetensors. It sends
                          its decision and the weights (the ones it read, or else its own current weights) to every
                          rank with broadcast_object_list, and every rank loads them into the model: every rank ends
                          with rank 0's weights, also where the checkpoint is on rank 0's disk only. It returns
                          {"loaded": bool, "path": <the file, or None>, "why": <why not, or "">} on every rank.
  resume()                at the start of every attempt (automatic_checkpoint_naming=True): rank 0 picks the newest
                          COMPLETE checkpoint_<i> under project_dir/checkpoints, removes the incomplete ones after it,
                          and sends its pick to every rank; every rank then load_state(<it>), and the next save is
                          checkpoint_<i+1>. Returns the folder, or None for a fresh start (where load_state() with no
                          checkpoint raises).
  the rotation            ProjectConfiguration(total_limit=N) is taken over: save_state deletes the oldest folders
                          BEFORE it writes the new one; here rank 0 alone deletes them (marker first), once the new
                          checkpoint's marker is written.

How to use it, in your own loop (accelerate launch, torchrun or any launcher):

    from rank0_leads import Rank0Leads

    accelerator = Accelerator(project_config=ProjectConfiguration(project_dir="out",
                                                                  automatic_checkpoint_naming=True, total_limit=2))
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    leads = Rank0Leads(accelerator, model)
    start = 0
    if (folder := leads.resume()) is not None:  # every rank; the newest complete checkpoint, already loaded
        start = int(folder.rsplit("_", 1)[1]) + 1
    for epoch in range(start, epochs):
        ...
        leads.save()  # or leads.save("out/best") at a new best
    result = leads.load_best("out/best")  # every rank: rank 0's decision and weights

The races it holds (each measured with real ranks, see docs/fixes/accelerate.md): readers that come before the
writer's last save ends (a late writer, an older file already there, a half-written file), a save that fails with
OSError (every rank says so and ends on rank 0's weights), ranks whose guard saw no file and skipped the sync,
checkpoints on node-local disks (no shared filesystem), rank 0 killed halfway through a save (the restart resumes from
the previous complete checkpoint), and the rotation (one deleter, after the new checkpoint is complete).

Five methods are the places to observe or change it in a subclass: broadcast_from_rank0(value) and wait_for_all()
(its two collectives), list_checkpoints(folder), read_weights(path) and delete(folder) (rank 0's listing, read and
deletion).
"""
import hashlib
import json
import logging
import os
import re
import shutil

import safetensors.torch
import torch.distributed as dist
from accelerate import Accelerator

logger = logging.getLogger(__name__)

MARKER = "rank0_leads.complete"  # written last in a checkpoint folder: the commit point
WEIGHTS = "model.safetensors"  # what save_state writes for the (first) model, with safe_serialization
CHECKPOINT = re.compile(r"^checkpoint_([0-9]+)$")  # automatic_checkpoint_naming's folders


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def sha256_of(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_of(folder) -> list:
    return sorted(n for n in os.listdir(folder) if n != MARKER and not n.startswith(".")
                  and os.path.isfile(os.path.join(folder, n)))


def is_complete(folder) -> bool:
    """Whether a checkpoint folder has its marker and every file the marker names is the one it names."""
    try:
        with open(os.path.join(folder, MARKER)) as f:
            record = json.load(f)
        files = record["sha256"]
        return WEIGHTS in files and all(sha256_of(os.path.join(folder, n)) == h for n, h in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def write_marker(folder):
    """The marker, atomically (a temporary name, fsync, rename), after every other file in the folder."""
    record = json.dumps({"sha256": {n: sha256_of(os.path.join(folder, n)) for n in files_of(folder)}})
    tmp = os.path.join(folder, f".{MARKER}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(record)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(folder, MARKER))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def number_of(folder) -> int:
    return int(CHECKPOINT.match(os.path.basename(folder)).group(1))


class Rank0Leads:
    """save / load_best / resume around one Accelerator and its (prepared) model (this module's docstring says how)."""

    def __init__(self, accelerator: Accelerator, model):
        self.accelerator, self.model = accelerator, model
        config = accelerator.project_configuration
        self.keep_last = config.total_limit  # the rotation is this class's, after the marker
        config.total_limit = None  # so save_state deletes nothing before the new checkpoint is complete
        self.errors = {}  # checkpoint folder -> the OSError of a save this process failed

    # --- the places a subclass may observe or change ---
    def broadcast_from_rank0(self, value):
        """Rank 0's `value` on every rank (every rank calls it; the others pass None)."""
        if not distributed():
            return value
        box = [value if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def wait_for_all(self):
        self.accelerator.wait_for_everyone()

    def list_checkpoints(self, folder) -> list:
        """The checkpoint_<i> folders in `folder`, oldest first (by i)."""
        names = [n for n in os.listdir(folder) if CHECKPOINT.match(n)] if os.path.isdir(folder) else []
        return [os.path.join(folder, n) for n in sorted(names, key=number_of)]

    def read_weights(self, path) -> dict:
        return safetensors.torch.load_file(path)  # safetensors: no code runs

    def delete(self, folder):
        """Rank 0's deletion of a checkpoint: the marker first, so that one half deleted never reads as complete."""
        if os.path.exists(os.path.join(folder, MARKER)):
            os.remove(os.path.join(folder, MARKER))
        shutil.rmtree(folder, ignore_errors=True)

    # --- the save ---
    def is_writer(self) -> bool:
        """Where save_state writes the model: the main process, or each node's with save_on_each_node."""
        if self.accelerator.project_configuration.save_on_each_node:
            return self.accelerator.is_local_main_process
        return self.accelerator.is_main_process

    def checkpoints_folder(self) -> str:
        return os.path.join(self.accelerator.project_dir, "checkpoints")

    def save(self, output_dir=None) -> bool:
        """save_state(output_dir) on every rank, then the marker; False where this process's save failed."""
        accelerator = self.accelerator
        folder = os.path.abspath(output_dir or os.path.join(self.checkpoints_folder(),
                                                            f"checkpoint_{accelerator.save_iteration}"))
        if self.is_writer() and os.path.exists(os.path.join(folder, MARKER)):
            os.remove(os.path.join(folder, MARKER))  # about to be rewritten: not complete until the new marker
        ok = True
        try:
            accelerator.save_state(output_dir)
        except OSError as e:
            ok = False
            self.errors[folder] = e
            logger.warning(f"Saving to {folder} failed ({type(e).__name__}: {e}); training goes on, and this "
                           "checkpoint will never be read.")
            if output_dir is None:  # as a save_state that ended would (every rank then names the next one alike)
                accelerator.project_configuration.iteration += 1
        self.wait_for_all()  # every rank's files are written
        if ok and self.is_writer() and os.path.exists(os.path.join(folder, WEIGHTS)):
            write_marker(folder)  # the commit point, last
        if self.keep_last and output_dir is None and accelerator.is_main_process:  # the rotation, rank 0 alone
            listed = self.list_checkpoints(self.checkpoints_folder())
            kept = [c for c in listed if is_complete(c)][-self.keep_last:]
            for old in listed:
                if kept and number_of(old) < number_of(kept[0]):
                    self.delete(old)
        return ok

    # --- the load at the end ---
    def load_best(self, input_dir) -> dict:
        """Every rank: rank 0's decision, and its weights in the model."""
        decision = self.broadcast_from_rank0(self.decide(input_dir) if self.accelerator.is_main_process else None)
        self.accelerator.unwrap_model(self.model).load_state_dict(decision.pop("weights"))
        if decision["loaded"]:
            logger.info(f"Every rank loaded rank 0's {decision['path']}.")
        else:
            logger.warning(f"Not loading {input_dir}: {decision['why']}; every rank keeps rank 0's weights.")
        return decision

    def decide(self, input_dir) -> dict:
        """On rank 0: load or not, and the weights every rank is to hold."""
        folder = os.path.abspath(input_dir)
        failed = "; ".join(f"{os.path.basename(f)}: {type(e).__name__}: {e}" for f, e in self.errors.items())
        why = f"rank 0's save failed ({failed})" if failed else \
            f"{os.path.basename(folder)} is not complete on rank 0's disk" if not is_complete(folder) else ""
        if not why:
            path = os.path.join(folder, WEIGHTS)
            try:
                return {"loaded": True, "path": path, "why": "", "weights": self.read_weights(path)}
            except Exception as e:  # noqa: BLE001 (said, and every rank keeps rank 0's weights)
                why = f"rank 0 could not read {path} ({type(e).__name__}: {e})"
        own = self.accelerator.unwrap_model(self.model).state_dict()
        return {"loaded": False, "path": None, "why": why,
                "weights": {name: tensor.detach().cpu() for name, tensor in own.items()}}

    # --- the resume ---
    def resume(self):
        """Every rank, at the start of an attempt: load_state of rank 0's pick; the folder, or None."""
        def pick():
            listed = self.list_checkpoints(self.checkpoints_folder())
            complete = [c for c in listed if is_complete(c)]
            chosen = complete[-1] if complete else None
            for later in listed[listed.index(chosen) + 1 if chosen else 0:]:
                self.delete(later)  # incomplete: rank 0 alone removes it, before any rank lists or saves
            return chosen

        chosen = self.broadcast_from_rank0(pick() if self.accelerator.is_main_process else None)
        if chosen is None:
            return None
        self.accelerator.load_state(chosen)
        self.accelerator.project_configuration.iteration = number_of(chosen) + 1  # load_state does not set it
        return chosen
