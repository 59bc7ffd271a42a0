"""Rank0LeadsTrainer: a transformers Trainer whose checkpoints are led by rank 0. Copy this file into your project;
it needs only transformers, safetensors, torch and the standard library.

What it does, on top of the Trainer (5.x) as documented:
  the save      A save of the model that fails on the writer (OSError: a full disk, a dead mount) no longer leaves
                train(): it is remembered, its half-written model.safetensors is removed, and training goes on.
                After every checkpoint, every rank waits for the others (a barrier), then the writer writes
                `rank0_leads.complete` in the folder, last: the sha256 of its model.safetensors and the step. A
                checkpoint without that marker (rank 0 died or failed halfway) is never read.
  the rotation  save_total_limit is taken over: rank 0 alone deletes the older checkpoints, only once the new
                one's marker is written (marker first, then the folder), keeping the best one.
  the load at the end (load_best_model_at_end=True)  rank 0 alone decides and reads: when one of its saves
                failed, or the best checkpoint is incomplete, it decides not to load (a failed save is said on every
                rank, not hidden behind an older best); else it reads the best checkpoint's model.safetensors.
                Then it sends its decision and the weights (the ones it read, or else its own current weights) to
                every rank with broadcast_object_list, every rank loads them, and the Trainer's own read on each
                rank is skipped. Every rank ends with rank 0's weights, also where the checkpoint is on rank 0's
                disk only.
  the resume    train(resume_from_checkpoint=True) resumes from the newest COMPLETE checkpoint (its marker
                matches), which rank 0 picks and sends to every rank; with none it starts afresh (where the
                Trainer as shipped raises).
After train(), `trainer.best_load` says what the load at the end did: {"loaded": bool, "path": <file or None>,
"why": <why not, or "">}.

How to use it, in your own code (torchrun, accelerate launch or any launcher that starts a process group):

    from rank0_leads import Rank0LeadsTrainer

    args = TrainingArguments(output_dir="out", eval_strategy="epoch", save_strategy="epoch",
                             load_best_model_at_end=True, metric_for_best_model="accuracy", save_total_limit=2)
    trainer = Rank0LeadsTrainer(model=model, args=args, train_dataset=..., eval_dataset=..., compute_metrics=...)
    trainer.train(resume_from_checkpoint=True)  # True: the newest complete checkpoint, or a fresh start

The races it holds (each measured with real ranks, see docs/fixes/transformers.md): a writer late at the last save,
an older best already there, a half-written file, a save that fails with OSError (every rank says so and ends on
rank 0's weights), checkpoints on node-local disks (no shared filesystem), rank 0 killed halfway through a save
(the restart resumes from the previous complete checkpoint), ranks that list different newest checkpoints after a
restart, and the rotation (one deleter, after the new checkpoint is complete).

Four methods are the places to observe or change it in a subclass: broadcast_from_rank0(value) and wait_for_all()
(its two collectives), list_checkpoints(folder) and read_weights(path) (rank 0's listing and read).
"""
import hashlib
import json
import logging
import os
import re
import shutil

import safetensors.torch
import torch.distributed as dist
from transformers import Trainer, TrainerCallback

logger = logging.getLogger(__name__)

MARKER = "rank0_leads.complete"  # written last in a checkpoint folder: the commit point
WEIGHTS = "model.safetensors"  # what the Trainer writes for the model
CHECKPOINT = re.compile(r"^checkpoint-([0-9]+)$")  # the Trainer's checkpoint-<step> folders


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def sha256_of(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_complete(folder) -> bool:
    """Whether a checkpoint folder has its marker and its model.safetensors is the one the marker names."""
    try:
        with open(os.path.join(folder, MARKER)) as f:
            record = json.load(f)
        return sha256_of(os.path.join(folder, WEIGHTS)) == record["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def write_marker(folder, step: int):
    """The marker, atomically: a temporary name, fsync, rename. Written after everything else in the folder."""
    record = json.dumps({"sha256": sha256_of(os.path.join(folder, WEIGHTS)), "step": step})
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


def remove_checkpoint(folder):
    """The marker first, so that a checkpoint half deleted never reads as complete."""
    if os.path.exists(os.path.join(folder, MARKER)):
        os.remove(os.path.join(folder, MARKER))
    shutil.rmtree(folder, ignore_errors=True)


class Rank0LeadsTrainer(Trainer):
    """The Trainer with rank 0 leading every checkpoint decision (this module's docstring says how)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.keep_last = self.args.save_total_limit  # the rotation is this class's, after the marker
        self.args.save_total_limit = None  # so the Trainer deletes nothing before the new checkpoint is complete
        self.failed_saves = {}  # checkpoint folder -> the error, for each model file this process failed to write
        self.best_load = None  # what the load at the end did (after train())
        self.best_checkpoint = None  # state.best_model_checkpoint, kept aside while the Trainer's own read is skipped
        self.add_callback(CommitCheckpoint(self))

    # --- the places a subclass may observe or change ---
    def broadcast_from_rank0(self, value):
        """Rank 0's `value` on every rank (every rank calls it; the others pass None)."""
        if not distributed():
            return value
        box = [value if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def wait_for_all(self):
        if distributed():
            dist.barrier()

    def list_checkpoints(self, folder) -> list:
        """The checkpoint-<step> folders in `folder`, oldest first (by step)."""
        names = [n for n in os.listdir(folder) if CHECKPOINT.match(n)] if os.path.isdir(folder) else []
        return [os.path.join(folder, n) for n in sorted(names, key=lambda n: int(CHECKPOINT.match(n).group(1)))]

    def read_weights(self, path) -> dict:
        return safetensors.torch.load_file(path)  # safetensors: no code runs

    # --- the save ---
    def save_model(self, output_dir=None, _internal_call=False):
        if not _internal_call:  # your own save_model call: the Trainer's
            return super().save_model(output_dir, _internal_call)
        folder = os.path.abspath(output_dir or self.args.output_dir)
        if self.args.should_save and os.path.exists(os.path.join(folder, MARKER)):
            os.remove(os.path.join(folder, MARKER))  # about to be rewritten: not complete until the new marker
        try:
            super().save_model(output_dir, _internal_call)
        except OSError as e:
            logger.warning(f"Saving the model to {folder} failed ({type(e).__name__}: {e}); training goes on, and "
                           "this checkpoint will never be read.")
            self.failed_saves[folder] = f"{type(e).__name__}: {e}"
            if os.path.exists(os.path.join(folder, WEIGHTS)):
                os.remove(os.path.join(folder, WEIGHTS))  # half written: never read, and its space back

    def committed(self, state):
        """After a whole checkpoint, on every rank: every rank's files are written; then the writer's marker, last,
        and rank 0's rotation."""
        folder = os.path.abspath(os.path.join(self.args.output_dir, f"checkpoint-{state.global_step}"))
        self.wait_for_all()
        if self.args.should_save and folder not in self.failed_saves and os.path.exists(
                os.path.join(folder, WEIGHTS)):
            write_marker(folder, state.global_step)
        if self.keep_last and self.is_world_process_zero():
            self.rotate(state)

    def rotate(self, state):
        checkpoints = self.list_checkpoints(self.args.output_dir)
        keep = set([c for c in checkpoints if is_complete(c)][-self.keep_last:])
        if state.best_model_checkpoint:
            keep.add(os.path.abspath(state.best_model_checkpoint))
        for folder in checkpoints:
            if os.path.abspath(folder) not in {os.path.abspath(k) for k in keep}:
                logger.info(f"Deleting older checkpoint {folder} (save_total_limit={self.keep_last})")
                remove_checkpoint(folder)

    # --- the load at the end ---
    def log(self, logs, *args, **kwargs):
        super().log(logs, *args, **kwargs)
        # train() logs its train_runtime right before it loads the best model: rank 0's load takes that place
        if "train_runtime" in logs and self.args.load_best_model_at_end:
            self.load_best_from_rank0()

    def load_best_from_rank0(self):
        decision = self.broadcast_from_rank0(self.decide() if self.is_world_process_zero() else None)
        self.model.load_state_dict(decision.pop("weights"))
        self.best_load = decision
        self.best_checkpoint = self.state.best_model_checkpoint
        self.state.best_model_checkpoint = None  # the Trainer's own read, on every rank, is skipped
        if decision["loaded"]:
            logger.info(f"Every rank loaded rank 0's best model, {decision['path']}.")
        else:
            logger.warning(f"Not loading the best model: {decision['why']}; every rank keeps rank 0's weights.")

    def decide(self) -> dict:
        """On rank 0: load or not, and the weights every rank is to hold. After a failed save nothing is loaded, not
        even an older best: the run is to say that its save failed, on every rank, rather than end as if it had not."""
        best = self.state.best_model_checkpoint
        folder = os.path.abspath(best) if best else None
        failed = "; ".join(f"{os.path.basename(f)}: {error}" for f, error in self.failed_saves.items())
        why = f"rank 0's save failed ({failed})" if failed else "rank 0 has no best checkpoint" if folder is None \
            else f"{os.path.basename(folder)} is not complete on rank 0's disk" if not is_complete(folder) else ""
        if not why:
            path = os.path.join(folder, WEIGHTS)
            try:
                return {"loaded": True, "path": path, "why": "", "weights": self.read_weights(path)}
            except Exception as e:  # noqa: BLE001 (said, and every rank keeps rank 0's weights)
                why = f"rank 0 could not read {path} ({type(e).__name__}: {e})"
        own = {name: tensor.detach().cpu() for name, tensor in self.model.state_dict().items()}
        return {"loaded": False, "path": None, "why": why, "weights": own}

    # --- the resume ---
    def resume_point(self):
        """The newest complete checkpoint as rank 0 lists it, on every rank (None: there is none). Every rank calls
        it."""
        def newest():
            complete = [c for c in self.list_checkpoints(self.args.output_dir) if is_complete(c)]
            return complete[-1] if complete else None

        return self.broadcast_from_rank0(newest() if self.is_world_process_zero() else None)

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        self.failed_saves, self.best_load = {}, None  # this train()'s
        if resume_from_checkpoint is True:
            resume_from_checkpoint = self.resume_point()
        try:
            return super().train(resume_from_checkpoint, *args, **kwargs)
        finally:
            if self.best_checkpoint is not None:  # as the Trainer leaves it
                self.state.best_model_checkpoint, self.best_checkpoint = self.best_checkpoint, None


class CommitCheckpoint(TrainerCallback):
    """Rank0LeadsTrainer's marker and rotation, after the Trainer has written a whole checkpoint."""

    def __init__(self, trainer: Rank0LeadsTrainer):
        self.trainer = trainer

    def on_save(self, args, state, control, **kwargs):
        self.trainer.committed(state)
