"""accelerate 1.15's own resume (workload=resume, issue 15): the user's loop with
Accelerator(project_config=ProjectConfiguration(project_dir, automatic_checkpoint_naming=True, total_limit)),
`accelerator.save_state()` after every epoch (project_dir/checkpoints/checkpoint_<i>/: model.safetensors,
optimizer.bin on the main process, random_states_<rank>.pkl on every rank), and at the start of every attempt
torch elastic makes, the pattern users write around `accelerator.load_state()` with no argument:

    if checkpoints folder has anything:        # load_state() with none raises (listdir / an empty list)
        accelerator.load_state()               # picks the highest checkpoint_<i> by its number
        start_epoch = <that i> + 1             # read from the folder name, as the examples do
        accelerator.project_configuration.iteration = start_epoch   # else save_state refuses checkpoint_<i>

What the shipped code does (accelerator.py, 1.15.0): load_state sorts the folder names by their trailing number
and reads the last; it checks nothing about completeness. save_state creates checkpoint_<i> first, then (after a
wait_for_everyone) writes into it; with total_limit the main process alone deletes the oldest folders, BEFORE
the new one is written. load_state does not restore `iteration`: the user sets it (above). No broadcast follows
the read: each rank's model holds what it read itself.

Seams (public, on every rank):
  register_load_state_pre_hook(fn(models, input_dir))   the folder load_state picked: load_attempt.
  register_save_state_pre_hook(fn(models, weights, output_dir))   the digest of the weights written; where
      the scenario kills rank 0 halfway through the model file (fault.kill_at=mid_write) or the fix writes it
      another way (atomic), the main process writes model.safetensors itself, the same safetensors bytes,
      through faults.resume_write, and empties `weights` (the override the hook's docs describe).
  The rotation runs inside save_state, before its pre-hook: the hook records the folders gone since the save began.
No public seam lets one rank list other names than its peer inside load_state (it calls os.listdir itself), and
there is no pointer: resume_disagree and pointer_first are n/a (framework.py's lacks: listing, pointer).

Fixes (cfg["fix"]["name"]), each from train/fixes.py:
  as_shipped  the pattern above
  atomic      model.safetensors through fixes.atomic_write (temporary name, fsync, rename); load_state() as shipped
  manifest    after save_state and a wait_for_everyone, rank 0 writes model.safetensors.complete
              (fixes.write_marker, with the epoch); the resume reads the newest folder fixes.is_complete accepts,
              with load_state(<it>), and the next save goes past every existing folder
  agreed      rank 0 picks the folder as load_state() would (fixes.rank0_decides); every rank load_state(<it>)
  rank0_leads Rank0Leads (rank0_leads.py, the file users copy; seams.py observes it): its save (a marker written
              last after a wait_for_everyone; total_limit taken over: rank 0 deletes after the marker) and its resume
              (rank 0 picks the newest complete folder and removes the incomplete ones after it; every rank loads it)
  own         a class of yours with Rank0Leads's methods (fix._target_), called as Rank0Leads is: its save() after
              every epoch, its resume() at the start of every attempt
(rank0_rotates is as shipped: save_state's deletion runs on the main process only; dcp is Accelerate's FSDP path.)
Events: those of train/frameworks/torch_loop/, `path` a checkpoint_<i> folder.
"""
import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import SAFE_WEIGHTS_NAME, ProjectConfiguration, set_seed
from torch.utils.data import DataLoader, TensorDataset

from train.fixes import SyncFailed, atomic_write, is_complete, marker_of, rank0_decides, write_marker
from train.toolkit.rank import Rank, checkpoint_dir, say
from train.toolkit.model import digits_split, small_cnn
from train.toolkit.errors import error_fields
from train.toolkit.model import weights_digest
from train.toolkit.resume import start_attempt, write_in_place
from train.frameworks.accelerate.seams import observed_helper, write_model_file


@dataclass(frozen=True)
class Way:
    """How the loop does one fix: each field one difference from the user's pattern as shipped (as_shipped)."""
    write: object = write_in_place  # how the main process puts model.safetensors: write(path, fill)
    marker: bool = False  # a marker written last; the newest complete folder read, the next save past every folder
    rank0_picks: bool = False  # rank 0 picks the folder as load_state() would, every rank loads that one
    leads: bool = False  # the helper (Rank0Leads, or yours): its save and its resume


# the dispatch: fix.name -> how the loop does it (framework.py names these fixes, and why it lacks others)
BY_FIX = {
    "as_shipped": Way(),
    "atomic": Way(write=atomic_write),
    "manifest": Way(marker=True),
    "agreed": Way(rank0_picks=True),
    "rank0_leads": Way(leads=True),
    "own": Way(leads=True),  # a class of yours with Rank0Leads's methods (framework.py's own_bases)
}


def number_of(folder) -> int:
    """The checkpoint number load_state and save_state sort by: the trailing digits of the name."""
    return int(re.findall(r"([0-9]+)$", Path(folder).name)[0])


class AccelerateResume:
    def __init__(self, rank: Rank):
        cfg = rank.cfg
        self.rank, self.cfg, self.events, self.faults = rank, cfg, rank.events, rank.faults
        self.way = BY_FIX[cfg["fix"]["name"]]
        self.project_dir = Path(checkpoint_dir(cfg))  # ProjectConfiguration's project_dir
        self.folder = self.project_dir / "checkpoints"  # where automatic_checkpoint_naming puts checkpoint_<i>
        self.keep = cfg["checkpoint"]["keep_last"]  # total_limit (0: keep all)
        self.loading = None  # the folder load_state picked (its pre-hook says)
        self.written = None  # the digest of the weights the last save_state wrote
        self.epoch = None  # the epoch being saved
        self.before = set()  # the checkpoint folders before the save

    def run(self):
        cfg, data = self.cfg, self.cfg["data"]
        start_attempt(self.rank, self.folder)
        # the process group is train/rank/worker.py's (gloo, timeout.collective_s): Accelerate finds it and uses it
        self.accelerator = accelerator = Accelerator(
            cpu=self.rank.device.type == "cpu",
            project_config=ProjectConfiguration(project_dir=str(self.project_dir), automatic_checkpoint_naming=True,
                                                total_limit=self.keep or None))
        accelerator.register_save_state_pre_hook(self.before_save)
        accelerator.register_load_state_pre_hook(self.before_load)
        set_seed(cfg["seed"])
        x_train, y_train, _, _ = digits_split(data, cfg["seed"])
        optimizer = torch.optim.SGD((model := small_cnn(1)).parameters(), lr=cfg["lr"])  # as torch_loop's
        self.model, optimizer, train_dl = accelerator.prepare(
            model, optimizer, DataLoader(TensorDataset(x_train, y_train), batch_size=data["batch_size"], shuffle=True))
        self.steps_per_epoch = len(train_dl)
        self.leads = observed_helper(cfg["fix"], accelerator, self.model, self.events) if self.way.leads else None

        start = self.resume()
        self.events.record("fit_start", train_batches=self.steps_per_epoch, node_local=cfg["checkpoint"]["node_local"],
                           start_epoch=start)
        epoch = start
        try:
            for epoch in range(start, cfg["epochs"]):
                train_dl.set_epoch(epoch)
                self.model.train()
                for x, y in train_dl:
                    accelerator.backward(F.cross_entropy(self.model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
                say(f"epoch {epoch} trained")
                self.save(epoch)
        except SyncFailed:
            raise RuntimeError("a sync failed (recorded)") from None
        except Exception as e:  # recorded, then the rank dies as a real loop would: torch elastic restarts it
            self.events.record("train_error", epoch=epoch, **error_fields(e))
            raise
        self.events.record("train_end")
        # its parameters, which DDP keeps equal on every rank (BatchNorm's statistics are each rank's last batch's)
        self.events.record("final", digest=weights_digest(dict(self.unwrapped().named_parameters())))

    def unwrapped(self):
        return self.accelerator.unwrap_model(self.model)

    def digest(self) -> str:
        return weights_digest(self.unwrapped().state_dict())

    def checkpoints(self) -> list:
        """The names in the checkpoints folder, oldest first, as load_state sorts them."""
        names = list(self.folder.iterdir()) if self.folder.is_dir() else []
        return sorted(names, key=number_of)

    # --- the resume ---
    def resume(self) -> int:
        """The user's resume at the start of an attempt; the epoch to start from. A failed read is recorded and
        raised: the rank dies, and torch elastic restarts the group (a crash loop if it is read again)."""
        listed = self.checkpoints()
        names = [p.name for p in listed]
        if self.leads is not None:
            return self.resume_led(names)
        chosen = self.choose(listed)
        if self.way.marker and listed:  # the next save goes past every folder there: the newest may be an
            self.accelerator.project_configuration.iteration = number_of(listed[-1]) + 1  # incomplete one
        if chosen is None:
            self.events.record("resume", epoch=-1, step=0, path=None, digest=self.digest(), listing=names)
            return 0
        try:
            if chosen == "newest":
                self.accelerator.load_state()  # as shipped: it picks the highest checkpoint_<i> itself
            else:
                self.accelerator.load_state(str(chosen))
        except Exception as e:
            self.events.record("load_error", path=self.loading, **error_fields(e))
            say(f"Resume from {Path(self.loading or '?').name} failed: {type(e).__name__}: {e}")
            raise
        loaded = Path(self.loading)
        epoch = self.marked_epoch(loaded) if self.way.marker else number_of(loaded)  # the examples' way
        step = (epoch + 1) * self.steps_per_epoch
        self.events.record("resume", epoch=epoch, step=step, path=str(loaded), digest=self.digest(), listing=names)
        if not self.way.marker:  # the next save's checkpoint_<i>: the user's line (load_state does not set it)
            self.accelerator.project_configuration.iteration = epoch + 1
        say(f"Resumed from {loaded.name} (epoch {epoch}, step {step}).")
        return epoch + 1

    def resume_led(self, names: list) -> int:
        """fix=rank0_leads or own: the helper's resume() on every rank (the folder it loaded, or None); the epoch to
        start from."""
        try:
            chosen = self.leads.resume()
        except SyncFailed:
            raise
        except Exception as e:
            self.events.record("load_error", path=self.loading, **error_fields(e))
            say(f"Resume from {Path(self.loading or '?').name} failed: {type(e).__name__}: {e}")
            raise
        if chosen is None:
            self.events.record("resume", epoch=-1, step=0, path=None, digest=self.digest(), listing=names)
            return 0
        epoch = number_of(chosen)  # the examples' way: the folder's number (it saves checkpoint_<epoch>)
        step = (epoch + 1) * self.steps_per_epoch
        self.events.record("resume", epoch=epoch, step=step, path=str(chosen), digest=self.digest(), listing=names)
        say(f"Resumed from {Path(chosen).name} (epoch {epoch}, step {step}).")
        return epoch + 1

    def choose(self, listed: list):
        """None: a fresh start; "newest": load_state() picks; else the folder to pass to load_state."""
        if self.way.marker:
            complete = [p for p in listed if is_complete(p / SAFE_WEIGHTS_NAME)]
            return complete[-1] if complete else None
        if self.way.rank0_picks:
            chosen = rank0_decides(self.events, lambda: str(listed[-1]) if listed else None)
            return Path(chosen) if chosen else None
        return "newest" if listed else None  # the user's guard: load_state() with nothing there raises

    def marked_epoch(self, folder: Path) -> int:
        return json.loads(marker_of(folder / SAFE_WEIGHTS_NAME).read_text())["epoch"]

    def before_load(self, models, input_dir):
        """Accelerate's load pre-hook, on every rank: the folder it is about to read."""
        self.loading = str(input_dir)
        model_file = Path(input_dir) / SAFE_WEIGHTS_NAME
        self.events.record("load_attempt", path=self.loading,
                           bytes=model_file.stat().st_size if model_file.exists() else None)

    # --- the save ---
    def save(self, epoch: int):
        """save_state() on every rank, as the docs show; the main process writes the model and deletes the oldest
        folders (total_limit), every rank its random states."""
        self.epoch, step = epoch, (epoch + 1) * self.steps_per_epoch
        path = self.folder / f"checkpoint_{self.accelerator.save_iteration}"
        main = self.accelerator.is_main_process
        self.before = set(self.checkpoints())  # what the rotation may delete (before_save says what it did)
        if main:
            self.events.record("save_start", epoch=epoch, step=step, path=str(path))
        saved = True  # False: this process's save failed (Rank0Leads keeps the error and goes on)
        if self.leads is not None:
            saved = self.leads.save() is not False
        else:
            self.accelerator.save_state()
        if self.way.marker:
            self.accelerator.wait_for_everyone()  # every rank's files are written: then the commit point
            if main:
                model_file = path / SAFE_WEIGHTS_NAME
                write_marker(model_file, model_file.read_bytes(), digest=self.written, step=step, epoch=epoch)
        if main and saved:
            size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
            self.events.record("save_end", epoch=epoch, step=step, path=str(path), digest=self.written, bytes=size)
            self.faults.kill_point("after_save", epoch, path)

    def before_save(self, models, weights, output_dir):
        """Accelerate's save pre-hook, on every rank, before it writes; weights[0]: the model's state dict."""
        self.written = weights_digest(weights[0])
        if self.accelerator.is_main_process:  # total_limit's deletion is done by now, the new files not yet
            for gone in sorted(self.before - set(self.checkpoints()), key=number_of):
                self.events.record("rotate", path=str(gone))
        if not self.accelerator.is_main_process or (self.way.write is write_in_place and
                                                    self.cfg["fault"]["kill_at"] != "mid_write"):
            return  # Accelerate writes the model itself
        write_model_file(weights, output_dir, self.way.write,
                         lambda f, data: self.faults.resume_write(f, data, self.epoch, output_dir))


def fit_and_resume(rank: Rank):
    """workload=resume: save_state() every epoch, load_state() at the start of every attempt."""
    AccelerateResume(rank).run()
