"""transformers: the Trainer keeps the best checkpoint with TrainingArguments(load_best_model_at_end=True,
metric_for_best_model="accuracy") and loads it when train() ends, as shipped (5.23.0), on CPU ranks over
the gloo group that train/rank/worker.py created (accelerate finds it and uses it).

What the Trainer does, every epoch: evaluate (the metric, shaped by the scenario), then _save_checkpoint:
`save_model` (the writer: global rank 0, or each node's local rank 0 with save_on_each_node) writes
checkpoint-<step>/model.safetensors, `dist.barrier()`, then each rank on its own sets
state.best_model_checkpoint if that folder exists on ITS disk. When train() ends, `_load_best_model`
(private, no barrier of its own) reads model.safetensors from best_model_checkpoint on every rank; a
missing file only logs "Could not locate the best model", and the rank keeps its training weights.

The seams used (all public):
  RaceTrainer.save_model   every rank, right before the barrier: fault before_last_save, the sync_enter
  the writer's bytes       safetensors.torch.save_file is swapped inside save_model only (seams.py):
                           the same bytes reach the file through faults.write (torn, save_fails)
  on_save                  after the barrier: sync_exit
  on_log(train_runtime)    the Trainer's last log before _load_best_model: train_end, fault before_load,
                           load_attempt{path, bytes} of the file this rank is about to read
  on_train_end             after the load: what it read (load_done / load_error), the fixes that act there
  a logging.Handler        on transformers.trainer: the warning the Trainer gives instead of an error

What could only be seen from outside, after the fact: the Trainer's read itself. load_done's digest is of
the file read again with safetensors (no foreign code) in on_train_end, and the model's digest then says
whether the Trainer loaded it; a missing file is known from the Trainer's warning and from exists() on
this rank's disk. The Trainer writes a checkpoint every epoch; save_start/save_end are recorded for the
saves that hold a new best (the checkpoint it will load at the end), so "the last save" of
train/judge/ is the best checkpoint, and save_error for any failed save.

Fixes (cfg["fix"]["name"]):
  as_shipped          TrainingArguments as documented, nothing else
  save_on_each_node   TrainingArguments(save_on_each_node=True): each node's local rank 0 writes (#12421)
  broadcast           on_train_end: rank 0 reads its best file, every rank takes those weights (fixes.broadcast_read)
  agreed              a failed save is recorded and training goes on; before the load rank 0 decides for every
                      rank whether to load (fixes.agree); not loading = best_model_checkpoint None on every rank
  rank0_leads         Rank0LeadsTrainer (rank0_leads.py, the file users copy; seams.py observes it): rank 0 decides
                      and reads, every rank takes its decision and weights; a failed save goes on and is never read
  own                 a Trainer subclass or a TrainerCallback of yours. It and rank0_leads are judged alike, by
                      what each rank holds at the end (Observe.record_what_it_holds), never by the class's name

Measured, and why: small_cnn's BatchNorm running statistics differ between the DDP ranks after every epoch (each
rank updates them on its own batches; the Trainer evaluates the unwrapped model, so DDP never evens them out
before a save). So save_on_each_node's two copies differ (each node loads its own: race), and ranks that all
skip the load (agreed on save_fails) still end apart (race, not save_failed). Only a read of ONE file by every
rank (a shared filesystem, or broadcast) ends with equal replicas.
"""
import logging
import os
from dataclasses import dataclass

import numpy as np
import safetensors.torch
from transformers import Trainer, TrainerCallback, TrainingArguments, set_seed
from transformers.utils import logging as hf_logging

from train.fixes import LoadFailedOnRank0, SyncFailed, agree, broadcast_read
from train.toolkit.rank import Rank, checkpoint_dir, last_epoch, local_rank, named_class, say
from train.toolkit.model import digits_split
from train.toolkit.errors import error_fields
from train.toolkit.resume import write_in_place
from train.frameworks.transformers.model import Classifier, WEIGHTS, digest, epoch_of, examples, remove_contents
from train.frameworks.transformers.seams import ObservedRank0Leads, WriteSeamTrainer


@dataclass(frozen=True)
class Way:
    """How the adapter does one fix: each field one difference from the Trainer as documented (as_shipped)."""
    save_on_each_node: bool = False  # TrainingArguments(save_on_each_node=True): each node's local rank 0 writes
    broadcast: bool = False  # rank 0 reads its best file, every rank takes those weights
    agreed: bool = False  # a failed save is recorded, training goes on; rank 0 decides for every rank whether to load
    own: bool = False  # a Trainer subclass or a TrainerCallback of yours (fix._target_)
    leads: bool = False  # Rank0LeadsTrainer (rank0_leads.py): rank 0 decides, reads and sends, in its log()


# the dispatch: fix.name -> how the adapter does it (framework.py names these fixes, and why it lacks others)
BY_FIX = {
    "as_shipped": Way(),
    "save_on_each_node": Way(save_on_each_node=True),
    "broadcast": Way(broadcast=True),
    "agreed": Way(agreed=True),
    "own": Way(own=True),
    "rank0_leads": Way(leads=True),
}


class WarningSeen(logging.Handler):
    """Keeps the Trainer's warnings (transformers.trainer's logger) to tell what it did instead of raising."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


class RaceTrainer(WriteSeamTrainer):
    """The Trainer with the faults and events at save_model, its public seam on every rank, and its write seam
    (seams.py): the bytes of model.safetensors reach the file through faults.write (torn, save_fails)."""

    def __init__(self, *args, rank: Rank, way: Way, **kwargs):
        super().__init__(*args, **kwargs)
        self.rank, self.way, self.save_ok, self.phase = rank, way, None, "train"  # phase: where an error came from
        self.last = False  # the save under way is the last epoch's

    def before_write(self):
        self.last = epoch_of(self.state) == last_epoch(self.rank.cfg)
        if self.last:
            self.rank.faults.before_last_save()
        self.phase = "save"

    def after_write(self):
        self.phase = "barrier"  # next in _save_checkpoint: dist.barrier(), then each rank's exists()
        self.rank.events.record("sync_enter", how="barrier")

    def write_file(self, tensors, filename, data):
        """On the writer: the bytes through faults.write, the save recorded."""
        events, state, epoch = self.rank.events, self.state, epoch_of(self.state)
        best = state.best_global_step == state.global_step  # this checkpoint is the one it will load at the end
        if best:
            events.record("save_start", epoch=epoch, path=str(filename))
        try:
            write_in_place(filename, lambda f: self.rank.faults.write(f, data, self.last))
        except OSError as e:
            self.save_ok = False
            events.record("save_error", epoch=epoch, **error_fields(e))
            say(f"Save failed: {type(e).__name__}: {e}")
            if self.way.agreed:
                return  # the fix: recorded, training goes on, the ranks agree before the load
            raise  # as shipped: the error leaves train()
        self.save_ok = self.save_ok is not False
        if best:
            events.record("save_end", epoch=epoch, path=str(filename), digest=digest(tensors), bytes=len(data))
            say("Model saved.")


class Observe(TrainerCallback):
    """Events and faults at the Trainer's callbacks, and the fixes that act at the end."""

    def __init__(self, trainer: RaceTrainer, warnings: WarningSeen, said: WarningSeen):
        self.trainer, self.warnings, self.said = trainer, warnings, said
        self.rank, self.events, self.way = trainer.rank, trainer.rank.events, trainer.way
        self.attempt = None  # (path, existed) of the file this rank's Trainer was about to read
        self.trained = None  # the digest of the weights it trained, as train() ends, before any load
        self.said_before = 0  # how many warnings its code had given by then

    def on_save(self, args, state, control, **kwargs):
        self.trainer.phase = "train"
        self.events.record("sync_exit", how="barrier")  # after the barrier and the rest of _save_checkpoint

    def on_log(self, args, state, control, logs=None, **kwargs):
        if "train_runtime" not in (logs or {}):
            return  # only the log that train() writes right before _load_best_model
        self.events.record("train_end")
        self.trained, self.said_before = digest(self.trainer.model.state_dict()), len(self.said.messages)
        say("Attempting to load model.")
        if self.way.agreed and not self.agreed(state):
            state.best_model_checkpoint = None  # the Trainer loads only when it has one: every rank skips
            return
        self.rank.faults.before_load()
        self.trainer.phase = "load"
        best = state.best_model_checkpoint
        self.attempt = os.path.join(best, WEIGHTS) if best else None  # the best file, where this rank has one
        if self.way.broadcast or self.way.leads:  # the Trainer's own read on each rank is replaced by rank 0's,
            return  # which broadcast() and, for rank0_leads, ObservedRank0Leads.read_weights record where it reads
        if self.way.own and best is None:
            return  # what it ends with says what it did (on_train_end)
        if best is None:
            self.events.record("skip", reason="the Trainer had no best_model_checkpoint on this rank (the best "
                               "checkpoint's folder was not on its disk), so it loaded nothing")
            say("No best checkpoint on this rank: the Trainer does not load.")
            return
        size = os.path.getsize(self.attempt) if os.path.exists(self.attempt) else None
        self.events.record("load_attempt", path=self.attempt, bytes=size)

    def agreed(self, state) -> bool:
        def decide():
            best = state.best_model_checkpoint
            if self.trainer.save_ok is False:
                return False, "rank 0's save failed"
            if best is None or not os.path.exists(os.path.join(best, WEIGHTS)):
                return False, "rank 0 has no best checkpoint"
            return True, ""

        return agree(self.events, decide)

    def judged_by_what_it_holds(self) -> bool:
        """A class of yours, or rank0_leads (the file users copy): what it did is read from the weights it ends
        with, alike for both, never from which class it is (record_what_it_holds)."""
        return self.way.own or self.way.leads

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self.trainer.phase = "done"
        if self.way.broadcast:
            self.broadcast(state)
        elif self.judged_by_what_it_holds():
            self.record_what_it_holds()
        elif self.attempt:
            self.record_trainer_read()

    def record_what_it_holds(self):
        """What this rank's code did at the end, from what it holds: the weights it trained (it loaded nothing:
        skip), or others (load_done with their digest, and whether they are the best file on its own disk; the
        judge tells a checkpoint from a peer's weights by the digests). `said`: what its code warned meanwhile."""
        said = "; ".join(m[:200] for m in self.said.messages[self.said_before:])
        located = self.could_not_locate()
        if located:
            self.only_warned(located)
            return
        held = digest(self.trainer.model.state_dict())
        on_disk = bool(self.attempt) and os.path.exists(self.attempt) and \
            digest(safetensors.torch.load_file(self.attempt)) == held  # the best file's weights (read or kept)
        if not on_disk and held == self.trained:
            self.events.record("skip", reason="it loaded nothing and holds the weights it trained" +
                               (f" (it said: {said})" if said else ""))
            say("Not loading.")
            return
        self.events.record("load_done", path=self.attempt if on_disk else None, digest=held, from_disk=on_disk,
                           **({"said": said} if said else {}))
        say("Loaded model.")

    def could_not_locate(self) -> str:
        """The Trainer's warning that it found no best model on this rank, or ''."""
        return next((m[:200] for m in self.warnings.messages if "Could not locate the best model" in m), "")

    def only_warned(self, said: str):
        """The Trainer's read found no file: it only warned (`said`) and kept its training weights."""
        self.events.record("load_error", error_type="FileNotFoundError",
                           message=f"the Trainer only warned and kept its training weights (\"{said}\")")
        say("The Trainer could not locate the best model: it only warned and kept the training weights.")

    def record_trainer_read(self):
        """What the Trainer's _load_best_model did on this rank, seen from outside, after it."""
        located = self.could_not_locate()
        if located or not os.path.exists(self.attempt):
            self.only_warned(located or f"no {self.attempt} on this rank's disk")
            return
        read = safetensors.torch.load_file(self.attempt)
        self.events.record("load_done", path=self.attempt, digest=digest(read))
        say("Loaded model.")

    def broadcast(self, state):
        """The fix: rank 0 reads its best checkpoint, every rank ends on those weights."""
        def read():
            path = os.path.join(state.best_model_checkpoint or "<no best checkpoint>", WEIGHTS)
            self.events.record("load_attempt", path=path, bytes=os.path.getsize(path) if os.path.exists(path)
                               else None)
            return safetensors.torch.load_file(path)

        try:
            weights = broadcast_read(self.events, read)
        except SyncFailed:
            return
        except LoadFailedOnRank0 as e:
            self.events.record("load_error", **error_fields(e))
            return
        self.trainer.model.load_state_dict(weights)
        self.events.record("load_done", digest=digest(weights))
        say("Loaded model.")


def fit_and_load(rank: Rank):
    cfg = rank.cfg
    folder = checkpoint_dir(cfg)
    if not cfg["checkpoint"]["keep_existing"] and local_rank() == 0:
        remove_contents(folder)  # an earlier run's checkpoints; the folder itself may be a node's mount
    set_seed(cfg["seed"])
    x_train, y_train, x_valid, y_valid = digits_split(cfg["data"], cfg["seed"])
    batch, way = cfg["data"]["batch_size"], BY_FIX[cfg["fix"]["name"]]
    args = TrainingArguments(
        output_dir=folder, eval_strategy="epoch", save_strategy="epoch", load_best_model_at_end=True,
        metric_for_best_model="accuracy", greater_is_better=True, num_train_epochs=cfg["epochs"],
        learning_rate=cfg["lr"], per_device_train_batch_size=batch, per_device_eval_batch_size=batch,
        use_cpu=rank.device.type == "cpu", report_to=[], disable_tqdm=True, logging_strategy="no",
        ddp_backend=rank.plan["backend"], seed=cfg["seed"],
        ddp_find_unused_parameters=False,  # every parameter is used (quiets DDP's warning)
        save_on_each_node=way.save_on_each_node,  # the Trainer's own option (#12421)
        # save_only_model stays False: with it a rank that writes nothing never sees the best checkpoint's
        # folder (the RNG state each rank saves creates it), so it would not even try the load
    )
    trainer = None

    def accuracy(prediction) -> dict:
        value = float((np.argmax(prediction.predictions, axis=-1) == prediction.label_ids).mean())
        return {"accuracy": rank.faults.shape_metric(value, epoch_of(trainer.state))}

    own = named_class(cfg["fix"]["_target_"]) if way.own else \
        ObservedRank0Leads if way.leads else None  # a class of yours (fix=own), or fix=rank0_leads's
    trainer_class = RaceTrainer if own is None or not issubclass(own, Trainer) else \
        type(f"Race{own.__name__}", (RaceTrainer, own), {})  # RaceTrainer's calls to super() reach yours first
    trainer = trainer_class(model=Classifier(), args=args, train_dataset=examples(x_train, y_train),
                            eval_dataset=examples(x_valid, y_valid), compute_metrics=accuracy, rank=rank, way=way,
                            **(cfg["fix"]["kwargs"] if trainer_class is not RaceTrainer else {}))  # fix=own's
    trainer.leads_events = rank.events  # ObservedRank0Leads's (fix=rank0_leads)
    if own is not None and issubclass(own, TrainerCallback):
        trainer.add_callback(own(**cfg["fix"]["kwargs"]))
    warnings, said = WarningSeen(), WarningSeen()
    trainer_logger = hf_logging.get_logger("transformers.trainer")
    trainer_logger.addHandler(warnings)
    logging.getLogger().addHandler(said)  # what any code of yours (or rank0_leads.py) warns, through the root logger
    trainer.add_callback(Observe(trainer, warnings, said))
    rank.events.record("fit_start", train_batches=len(trainer.get_train_dataloader()),
                       node_local=cfg["checkpoint"]["node_local"])
    try:
        trainer.train()
    except SyncFailed:
        pass  # recorded (sync_error); the rank ends on what it holds
    except Exception as e:
        if not observed_failure(trainer, e):
            raise
        if trainer.phase == "save":  # as shipped, the Trainer raised the save's error: the rank goes with it
            rank.events.record("final", digest=digest(trainer.model.state_dict()))
            raise
    finally:
        trainer_logger.removeHandler(warnings)
        logging.getLogger().removeHandler(said)
    rank.events.record("final", digest=digest(trainer.model.state_dict()))


def observed_failure(trainer: RaceTrainer, e: Exception) -> bool:
    """Record an error out of train() by where it came from; False: not ours to explain (it is raised)."""
    events = trainer.rank.events
    if trainer.phase == "barrier":  # the barrier after a save: a peer died or never came
        events.record("sync_error", how="barrier", **error_fields(e))
        say(f"barrier failed: {type(e).__name__}: {e}")
    elif trainer.phase == "load":  # the Trainer's read raised (an unreadable file)
        events.record("load_error", **error_fields(e))
        say(f"Load failed: {type(e).__name__}: {e}")
    elif trainer.phase == "save":
        events.record("skip", reason="the Trainer raised its save's error out of train(), so it never loaded")
    else:
        return False
    return True
