"""transformers: the Trainer's OWN resume after a crash (issue 15), as shipped (5.23.0). train/frameworks/
transformers.py's fit_and_resume runs this; torch_loop.py is the reference for the events and fault points.

What the Trainer does, as documented: TrainingArguments(save_strategy="epoch") makes _save_checkpoint write
checkpoint-<global step>/ every epoch: save_model (model.safetensors, on args.should_save: process 0), then
optimizer.pt and scheduler.pt (should_save), rng_state_<rank>.pth (every rank, its own), trainer_state.json
(should_save), and with save_total_limit the rotation (trainer_utils.rotate_checkpoints, on should_save only,
shutil.rmtree(ignore_errors=True): transformers#20988's fix). No barrier after the save unless a best metric is
tracked. At the start of every attempt: trainer.train(resume_from_checkpoint=<the newest>), where the newest is
transformers.trainer_utils.get_last_checkpoint(output_dir): the checkpoint-<step> FOLDER with the highest step,
with no check of what is in it (5.23 has no staging folder: #35580's was reverted by #36112). We call
get_last_checkpoint ourselves and pass its path, as the Trainer's example scripts do (run_glue.py), because
resume_from_checkpoint=True with no checkpoint raises ValueError("No valid checkpoint found ...") in 5.23: a fresh
start passes None. The Trainer then reads model.safetensors into the model (_load_from_checkpoint, before
accelerate wraps it in DDP), trainer_state.json (the step), optimizer.pt, scheduler.pt and this rank's RNG file.

The seams (all public; torch_loop.py's events with the same fields):
  get_last_checkpoint + faults.listing   the newest checkpoint this rank sees (stale_listing hides it on rank 1)
  Classifier.load_state_dict             our model's own method, which the Trainer's resume read calls: the
                                         digest of what this rank read, BEFORE DDP's constructor copies rank 0's
                                         weights to every rank (which hides a rank that read another file)
  on_train_begin                         after every read: resume{epoch, step, path, digest, listing}
  the writer's bytes                     safetensors.torch.save_file swapped inside save_model only (the
                                         write seam, seams.py): faults.resume_write, save_start
  on_save                                after the whole checkpoint (and the Trainer's rotation): save_end,
                                         rotate{path} for each folder the rotation removed (seen after the fact),
                                         kill_point("after_save")
The cleanup scenario's delete race (faults.listed / before_delete) has no place: the Trainer deletes on process 0
alone, inside rotate_checkpoints; nothing is patched to add a second deleter.

Fixes (cfg["fix"]["name"]), each from train/fixes.py:
  as_shipped  the Trainer as documented
  atomic      model.safetensors through fixes.atomic_write (temporary name, fsync, rename)
  manifest    on_save writes model.safetensors.complete (fixes.write_marker) after the whole checkpoint; the
              resume takes the newest folder whose marker matches (fixes.is_complete)
  agreed      rank 0 runs get_last_checkpoint, every rank resumes from its answer (fixes.rank0_decides)
  rank0_leads Rank0LeadsTrainer (rank0_leads.py, the file users copy; seams.py observes it): a marker written last
              after a barrier, rank 0's rotation after it (save_total_limit taken over), and rank 0's pick of the
              newest complete checkpoint, sent to every rank (resume_point)
  own         a class of yours (fix._target_) under the Trainer's own resume: a TrainerCallback is attached, a
              Trainer subclass is the Trainer (ResumeTrainer's calls to super() reach yours first). A subclass with
              a train() of its own picks the checkpoint itself: it is called as its users call it after a restart,
              train(resume_from_checkpoint=True) (None on the first attempt, a fresh start), with the stale listing
              of resume_disagree placed in os.listdir and os.scandir of the folder (train/toolkit/listing.py),
              where no seam of ours lists it; the others get get_last_checkpoint's folder, as the examples pass it.
"""
import os
from dataclasses import dataclass
from pathlib import Path

from transformers import Trainer, TrainerCallback, TrainingArguments, set_seed
from transformers.trainer_utils import get_last_checkpoint, sort_checkpoints

from train.fixes import SyncFailed, atomic_write, is_complete, rank0_decides, write_marker
from train.events import attempt
from train.toolkit.listing import stale_listing
from train.toolkit.rank import Rank, checkpoint_dir, named_class, say
from train.toolkit.model import digits_split
from train.toolkit.errors import error_fields
from train.toolkit.resume import start_attempt, write_in_place
from train.frameworks.transformers.model import WEIGHTS, Classifier, digest, epoch_of, examples, remove_contents
from train.frameworks.transformers.seams import ObservedRank0Leads, WriteSeamTrainer


@dataclass(frozen=True)
class Way:
    """How the resume does one fix: each field one difference from the Trainer as documented (as_shipped)."""
    write: object = write_in_place  # how the writer puts model.safetensors: write(path, fill)
    marker: bool = False  # model.safetensors.complete written last; the resume from the newest complete folder
    rank0_picks: bool = False  # rank 0 runs get_last_checkpoint, every rank resumes from its answer
    leads: bool = False  # Rank0LeadsTrainer: its marker, its rotation, rank 0's pick of the newest complete one
    own: bool = False  # a TrainerCallback or a Trainer subclass of yours (fix._target_), under the Trainer's resume


# the dispatch: fix.name -> how the resume does it (framework.py names these fixes, and why it lacks others)
BY_FIX = {
    "as_shipped": Way(),
    "atomic": Way(write=atomic_write),
    "manifest": Way(marker=True),
    "agreed": Way(rank0_picks=True),
    "rank0_leads": Way(leads=True),
    "own": Way(own=True),
}


class ResumedClassifier(Classifier):
    """small_cnn for the Trainer, keeping the digest of the weights the Trainer's resume read into it."""
    read_digest = None  # set by the Trainer's load_state_dict call; None: nothing read

    def load_state_dict(self, state_dict, strict=True, assign=False):
        result = super().load_state_dict(state_dict, strict, assign)
        self.read_digest = digest(self.state_dict())
        return result


class ResumeTrainer(WriteSeamTrainer):
    """The Trainer with the write seam (seams.py) at save_model, its public method on every rank."""

    def __init__(self, *args, run, **kwargs):
        super().__init__(*args, **kwargs)
        self.run = run  # the TrainerResume: its events, faults, fix, and the save in progress

    def before_write(self):
        self.run.before_save = set(self.run.checkpoints())  # to see what the Trainer's rotation removes

    def write_file(self, tensors, filename, data):
        self.run.save_file(tensors, filename, data)


class Observe(TrainerCallback):
    def __init__(self, run):
        self.run = run  # the TrainerResume

    def on_train_begin(self, args, state, control, **kwargs):
        self.run.resumed(state)

    def on_save(self, args, state, control, **kwargs):
        self.run.saved(state)


class TrainerResume:
    def __init__(self, rank: Rank):
        cfg = rank.cfg
        self.rank, self.cfg, self.events, self.faults = rank, cfg, rank.events, rank.faults
        self.way = BY_FIX[cfg["fix"]["name"]]
        self.folder = checkpoint_dir(cfg)  # checkpoint-<step>/ folders, the Trainer's output_dir
        self.keep = cfg["checkpoint"]["keep_last"]  # save_total_limit (0: keep all)
        self.chosen, self.listed = None, []  # the checkpoint this attempt resumes from, and the names listed
        self.phase = "resume"  # where an error out of train() comes from: resume, then train
        self.pending = None  # (epoch, step, folder, digest, data) of the save whose bytes were written
        self.before_save = set()  # the checkpoint folders before a save

    def run(self):
        cfg = self.cfg
        start_attempt(self.rank, self.folder, empty=remove_contents)  # the folder itself may be a node's mount
        set_seed(cfg["seed"])
        x_train, y_train, _, _ = digits_split(cfg["data"], cfg["seed"])
        batch = cfg["data"]["batch_size"]
        args = TrainingArguments(
            output_dir=self.folder, save_strategy="epoch", eval_strategy="no", num_train_epochs=cfg["epochs"],
            save_total_limit=self.keep or None,  # the Trainer's own rotation (cleanup)
            learning_rate=cfg["lr"], per_device_train_batch_size=batch, seed=cfg["seed"],
            use_cpu=self.rank.device.type == "cpu", report_to=[], disable_tqdm=True, logging_strategy="no",
            ddp_backend=self.rank.plan["backend"],
            ddp_find_unused_parameters=False,  # every parameter is used (quiets DDP's warning)
            # save_only_model stays False: optimizer, scheduler and RNG states are saved and resumed, as shipped
        )
        self.model = ResumedClassifier()
        own = named_class(cfg["fix"]["_target_"]) if self.way.own else None  # a class of yours (fix=own)
        yours = own is not None and issubclass(own, Trainer)
        trainer_class = type("ResumeRank0LeadsTrainer", (ResumeTrainer, ObservedRank0Leads), {}) if self.way.leads \
            else type(f"Resume{own.__name__}", (ResumeTrainer, own), {}) if yours \
            else ResumeTrainer  # ResumeTrainer's calls to super() reach the fix's (or yours) first
        self.trainer = trainer_class(model=self.model, args=args, train_dataset=examples(x_train, y_train), run=self,
                                     **(cfg["fix"]["kwargs"] if yours else {}))
        self.trainer.leads_events = self.events  # ObservedRank0Leads's (fix=rank0_leads)
        self.trainer.add_callback(Observe(self))
        if own is not None and issubclass(own, TrainerCallback):
            self.trainer.add_callback(own(**cfg["fix"]["kwargs"]))
        # a Trainer subclass of yours with a train() of its own picks the checkpoint to resume from itself
        self.picks_itself = yours and own.train is not Trainer.train
        try:
            if self.picks_itself:
                self.train_picking_itself()
            else:
                self.chosen = self.choose()
                if self.chosen:
                    weights = os.path.join(self.chosen, WEIGHTS)
                    self.events.record("load_attempt", path=self.chosen,
                                       bytes=os.path.getsize(weights) if os.path.isfile(weights) else None)
                self.trainer.train(resume_from_checkpoint=self.chosen)
        except SyncFailed:
            raise RuntimeError("a sync failed (recorded)") from None
        except Exception as e:  # recorded, then the rank dies: torch elastic restarts the group
            self.failed(e)
            raise
        self.events.record("train_end")
        # its parameters, which DDP keeps equal; BatchNorm's statistics are each rank's own (torch_loop's rule)
        self.events.record("final", digest=digest(dict(self.model.named_parameters())))

    def train_picking_itself(self):
        """Your Trainer's train(resume_from_checkpoint=True) after a restart (None on the first attempt); what it
        resumed from is known once it did (resumed). On a restart, scenario=resume_disagree's stale listing is in
        os.listdir and os.scandir of the folder on every rank but 0, for the whole train() (its pick lists there)."""
        restarted = attempt() > 0
        self.listed = self.checkpoints()
        stale = restarted and self.cfg["fault"]["stale_listing"] and self.faults.rank != 0
        if stale:
            with stale_listing(self.folder, self.events):
                self.trainer.train(resume_from_checkpoint=True)
        else:
            self.trainer.train(resume_from_checkpoint=True if restarted else None)

    def failed(self, e: Exception):
        if self.phase == "resume":
            fields = error_fields(e)
            if isinstance(e, ValueError) and "Can't find a valid checkpoint" in str(e):
                # the Trainer's words for a folder without model.safetensors: a missing file
                fields = {**fields, "error_type": "FileNotFoundError",
                          "message": f"no {WEIGHTS} in it (the Trainer's ValueError: {fields['message']})"}
            self.events.record("load_error", path=self.chosen, **fields)  # None: the one your train() picked
            which = Path(self.chosen).name if self.chosen else "the checkpoint your train() picked"
            say(f"Resume from {which} failed: {type(e).__name__}: {e}")
        else:
            self.events.record("train_error", epoch=int(self.trainer.state.epoch or 0), **error_fields(e))

    # --- the resume ---
    def checkpoints(self) -> list:
        """The checkpoint-<step> folder names, oldest first (the Trainer's own sort, by step)."""
        return [os.path.basename(p) for p in sort_checkpoints(self.folder)]

    def newest(self):
        """The folder get_last_checkpoint finds, as this rank lists the folder (faults.listing may hide the newest)."""
        self.listed = self.faults.listing(self.checkpoints())
        if self.way.marker:  # the newest complete one
            complete = [n for n in self.listed if is_complete(os.path.join(self.folder, n, WEIGHTS))]
            return os.path.join(self.folder, complete[-1]) if complete else None
        found = get_last_checkpoint(self.folder)  # the Trainer's own rule
        if found and os.path.basename(found) not in self.listed:  # a stale listing: the newest it shows
            found = os.path.join(self.folder, self.listed[-1]) if self.listed else None
        return found

    def choose(self):
        if self.way.leads:  # this rank's listing, for the record; rank 0's pick is the one every rank takes
            self.listed = self.faults.listing(self.checkpoints())
            return self.trainer.resume_point()
        if self.way.rank0_picks:
            return rank0_decides(self.events, self.newest)
        return self.newest()

    def resumed(self, state):
        """on_train_begin: every read is done (weights, state, optimizer, scheduler)."""
        self.phase = "train"
        if self.picks_itself and self.model.read_digest is not None:  # your train() read checkpoint-<its step>
            self.chosen = os.path.join(self.folder, f"checkpoint-{state.global_step}")
        read = self.model.read_digest if self.chosen else digest(self.model.state_dict())
        self.events.record("resume", epoch=epoch_of(state) if self.chosen else -1, step=state.global_step,
                           path=self.chosen, digest=read, listing=self.listed)
        if self.chosen:
            say(f"Resumed from {Path(self.chosen).name} (step {state.global_step}).")
        self.events.record("fit_start", train_batches=len(self.trainer.get_train_dataloader()),
                           node_local=self.cfg["checkpoint"]["node_local"], start_epoch=epoch_of(state) + 1)

    # --- the save ---
    def save_file(self, tensors, filename, data):
        """safetensors.torch.save_file on the writer, inside save_model: its bytes through faults.resume_write."""
        state = self.trainer.state
        epoch, step, folder = epoch_of(state), state.global_step, os.path.dirname(filename)
        self.events.record("save_start", epoch=epoch, step=step, path=folder)
        self.way.write(filename, lambda f: self.faults.resume_write(f, data, epoch, folder))
        self.pending = (epoch, step, folder, digest(tensors), data)

    def saved(self, state):
        """on_save: the whole checkpoint is written (and rotated) on the writer."""
        if self.pending is None:
            return  # not the writer
        epoch, step, folder, weights, data = self.pending
        self.pending = None
        for gone in sorted(self.before_save - set(self.checkpoints())):
            self.events.record("rotate", path=os.path.join(self.folder, gone))
        if self.way.marker:
            write_marker(os.path.join(folder, WEIGHTS), data, digest=weights, step=step)  # the commit point, last
        self.events.record("save_end", epoch=epoch, step=step, path=folder, digest=weights, bytes=len(data))
        self.faults.kill_point("after_save", epoch, folder)


def fit_and_resume(rank: Rank):
    """The Trainer's own resume after a crash (workload=resume)."""
    TrainerResume(rank).run()
