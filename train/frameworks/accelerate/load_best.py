"""accelerate 1.15, workload=load_best (workload=resume, save_state() every epoch and load_state() at the start of
every attempt, is train/frameworks/accelerate/resume.py's, called by fit_and_resume below): the user's loop with
`Accelerator.save_state(<checkpoint_dir>/best)` on every rank whenever the validation accuracy is a new best (as
the docs show), and `Accelerator.load_state` of that folder on every rank after the last epoch. save_state
writes model.safetensors (safetensors) on the main process only, and neither it nor load_state waits for that
write: the user is to call `accelerator.wait_for_everyone()` between them (the docs' "Executing and deferring
jobs" guide; the checkpointing guide's example has a training loop between save and load, and no such line).
fix=as_shipped is the loop without it (docs/findings/accelerate.md).

Accelerate is a library, not a trainer: the loop is the user's, so shape_metric, before_last_save and the save and
load calls sit in it. Everything else goes through Accelerate's public hooks, on every rank:
  register_save_state_pre_hook(fn(models, weights, output_dir))  before the files are written: the digest of
      the state dict written. Where the scenario puts a fault in the write (torn, save_fails) or the fix writes
      another way (atomic), the hook writes model.safetensors itself, with the same safetensors bytes, through
      faults.write, and empties `weights` so that Accelerate writes no model (the override its docs describe);
      every other save is Accelerate's own write.
  register_load_state_pre_hook(fn(models, input_dir))  before the files are read: before_load, load_attempt;
      broadcast reads on rank 0 and sends, and empties `models` so that Accelerate reads no model.
What a rank read is its model right after load_state (a second read of the file could see a newer one).
Fixes (cfg["fix"]["name"]): Accelerate's own, and the product fixes of train/fixes.py, called here:
  as_shipped         nothing between the last save and the load
  wait_for_everyone  accelerator.wait_for_everyone() between them
  save_on_each_node  ProjectConfiguration(save_on_each_node=True) and wait_for_everyone (each node's local main
                     process writes a copy)
  agreed, broadcast, poll, atomic  as for fastai (train/fixes.py)
  rank0_leads        Rank0Leads (rank0_leads.py, the file users copy; seams.py observes it): its save (a marker
                     written last, a failed save kept and training goes on) and its load_best (rank 0 decides and
                     reads, every rank takes its decision and weights; no guard: rank 0's decision replaces it)
  own                a class of yours with Rank0Leads's methods (fix._target_), called as Rank0Leads is and judged
                     by what it did: its save_state and load_state (the hooks above), its reads and broadcast
Every improvement is saved (checkpoint.early_saves has no effect here). With real accuracy the digits reach their
best in the first epoch, so the last epoch saves nothing and no fault placed in the last save fires:
fault.best_epoch=-1 (every epoch improves) puts a save in the last epoch: configs/framework/accelerate.yaml sets
it (a scenario's own value wins). The optimizer is not prepared, so
save_state keeps the model only (with no accumulation nor mixed precision, prepare only wraps its step()).
"""
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import SAFE_WEIGHTS_NAME, ProjectConfiguration, set_seed
from safetensors.torch import load_file
from torch.utils.data import DataLoader, TensorDataset

from train.fixes import SyncFailed, agree, atomic_write, broadcast_read, wait_for_file, watched
from train.toolkit.rank import Rank, checkpoint_dir, last_epoch, local_rank, say
from train.toolkit.model import digits_split, small_cnn, weights_digest
from train.toolkit.errors import error_fields
from train.toolkit.resume import write_in_place
from train.frameworks.accelerate.seams import kept_error, observed_helper, write_model_file


def fit_and_load(rank: Rank):
    AccelerateRun(rank).fit_and_load()


def write_fault_placed(faults) -> bool:
    """Whether the scenario puts a fault where the bytes of a checkpoint reach the file (torn, save_fails)."""
    return faults.skew["mid_write_s"] > 0 or bool(faults.fault["save_error"])


class AccelerateRun:
    def __init__(self, rank: Rank):
        cfg = rank.cfg
        self.rank, self.cfg, self.events, self.faults = rank, cfg, rank.events, rank.faults
        self.way = BY_FIX[cfg["fix"]["name"]]
        self.folder = Path(checkpoint_dir(cfg)) / cfg["checkpoint"]["name"]  # save_state's output_dir
        self.model_file = self.folder / SAFE_WEIGHTS_NAME  # what save_state writes for the model
        self.timeout_s = cfg["timeout"]["collective_s"]  # a wait that is not a collective (poll, atomic)
        self.guard, self.node_local = cfg["checkpoint"]["guard"], cfg["checkpoint"]["node_local"]
        self.save_ok = None  # the last save's result on this rank: None (none yet), True, False
        self.written = None  # the digest of the state dict the last save_state wrote
        self.last = False  # in the last epoch
        self.leads = None  # fix=rank0_leads or own: the checkpoint helper (made once the model is prepared)
        self.read_here = False  # this rank's load_state read the folder (its load pre-hook ran)

    def fit_and_load(self):
        cfg, data = self.cfg, self.cfg["data"]
        if not cfg["checkpoint"]["keep_existing"] and local_rank() == 0:  # each node its own, where node-local
            shutil.rmtree(self.folder, ignore_errors=True)
        # the process group is train/rank/worker.py's (gloo, timeout.collective_s): Accelerate finds it and uses it
        self.accelerator = accelerator = Accelerator(
            cpu=self.rank.device.type == "cpu",
            project_config=ProjectConfiguration(project_dir=self.rank.run_dir,
                                                save_on_each_node=self.way.save_on_each_node))
        accelerator.register_save_state_pre_hook(self.before_save)
        accelerator.register_load_state_pre_hook(self.before_load)
        set_seed(cfg["seed"])
        x_train, y_train, x_valid, y_valid = digits_split(data, cfg["seed"])
        model = small_cnn(1)
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg["lr"])  # not prepared: save_state keeps the model
        self.model, train_dl, valid_dl = accelerator.prepare(
            model, DataLoader(TensorDataset(x_train, y_train), batch_size=data["batch_size"], shuffle=True),
            DataLoader(TensorDataset(x_valid, y_valid), batch_size=data["batch_size"]))
        if self.way.leads:
            self.leads = observed_helper(cfg["fix"], accelerator, self.model, self.events)
        self.events.record("fit_start", train_batches=len(train_dl), node_local=self.node_local)

        best = None
        for epoch in range(cfg["epochs"]):
            self.train_one_epoch(train_dl, optimizer)
            accuracy = self.validate(valid_dl)
            value = self.faults.shape_metric(accuracy, epoch)  # the monitored value
            say(f"epoch {epoch}: accuracy {accuracy:.6f}" + (f" (monitored: {value:g})" if value != accuracy else ""))
            new_best = best is None or value > best
            best = value if new_best else best
            self.last = epoch == last_epoch(cfg)
            if self.last:
                self.faults.before_last_save()
            if new_best:
                self.save(epoch)
        self.load_at_end()

    def train_one_epoch(self, train_dl, optimizer):
        self.model.train()
        for x, y in train_dl:
            self.accelerator.backward(F.cross_entropy(self.model(x), y))
            optimizer.step()
            optimizer.zero_grad()

    def validate(self, valid_dl) -> float:
        """The validation accuracy over every rank's share (gathered, as Accelerate's examples do)."""
        self.model.eval()
        correct = total = 0
        with torch.no_grad():
            for x, y in valid_dl:
                predictions, targets = self.accelerator.gather_for_metrics((self.model(x).argmax(dim=1), y))
                correct += (predictions == targets).sum().item()
                total += len(targets)
        return correct / total

    # --- the save ---
    def is_writer(self) -> bool:
        """Where save_state writes model.safetensors: the main process, or each node's with save_on_each_node."""
        if self.accelerator.project_configuration.save_on_each_node:
            return self.accelerator.is_local_main_process
        return self.accelerator.is_main_process

    def save(self, epoch: int):
        """save_state on every rank, as the docs show; a failed save is recorded and training goes on."""
        if self.is_writer():
            self.events.record("save_start", epoch=epoch, path=str(self.model_file))
        try:
            if self.leads is None:
                self.accelerator.save_state(str(self.folder))
            elif self.leads.save(str(self.folder)) is False:  # it kept the error: said here as the others are
                raise kept_error(self.leads)
        except OSError as e:
            self.save_ok = False
            self.events.record("save_error", epoch=epoch, **error_fields(e))
            say(f"Save failed: {type(e).__name__}: {e}")
            return
        self.save_ok = True
        if self.is_writer():
            self.events.record("save_end", epoch=epoch, path=str(self.model_file), digest=self.written,
                               bytes=self.model_file.stat().st_size)
            say("Model saved.")

    def before_save(self, models, weights, output_dir):
        """Accelerate's save pre-hook, on every rank, before it writes; weights[0]: the model's state dict."""
        self.written = weights_digest(weights[0])
        if not self.is_writer() or (self.way.write is write_in_place and not write_fault_placed(self.faults)):
            return  # Accelerate writes the model itself
        write_model_file(weights, output_dir, self.way.write, lambda f, data: self.faults.write(f, data, self.last))

    # --- the load at the end ---
    def load_at_end(self):
        self.events.record("train_end")
        say("Attempting to load model.")  # before any sync
        if self.leads is not None:
            self.load_led()
        elif self.guard_allows("sync") and self.sync() and self.guard_allows("load"):
            try:
                self.accelerator.load_state(str(self.folder))
            except SyncFailed:
                pass
            except Exception as e:
                self.events.record("load_error", **error_fields(e))
                say(f"Load failed: {type(e).__name__}: {e}")
            else:  # the model holds what load_state read (or what rank 0 sent), nothing since
                self.events.record("load_done", path=str(self.model_file), digest=self.digest())
                say("Loaded model.")
        self.events.record("final", digest=self.digest())

    def load_led(self):
        """fix=rank0_leads or own: the helper's load_best on every rank. Where it reads is recorded as it reads (its
        read_weights, or load_state's pre-hook); a rank that read nothing itself and was sent a peer's object in its
        broadcast holds what was sent. It returns {"loaded": False, "why": ...} when it decided not to load."""
        self.faults.before_load()
        self.leads.received = False
        try:
            result = self.leads.load_best(str(self.folder))
        except SyncFailed:
            return
        result = result if isinstance(result, dict) else {}
        if result.get("loaded") is False:
            why = result.get("why") or "it did not load"
            self.events.record("skip", reason=f"{why}: every rank agreed not to load, and holds rank 0's weights")
            say(f"Not loading: {why}.")
            return
        if self.leads.received and not self.read_here:
            self.events.record("load_attempt", source="broadcast from rank 0")
        self.events.record("load_done", path=result.get("path") or str(self.model_file), digest=self.digest())
        say("Loaded model.")

    def digest(self) -> str:
        # unwrapped from DDP: save_state's weights and its file have the model's own keys (no "module.")
        return weights_digest(self.accelerator.unwrap_model(self.model).state_dict())

    def sync(self) -> bool:
        """Between the last save and the load; False: do not load."""
        return self.way.sync(self)

    def sync_none(self) -> bool:
        return True  # as_shipped; broadcast syncs in its read

    def sync_barrier(self) -> bool:
        return watched(self.events, "barrier", self.accelerator.wait_for_everyone)

    def sync_file(self) -> bool:
        return watched(self.events, "file", lambda: wait_for_file(self.model_file, self.timeout_s))

    def sync_agreed(self) -> bool:
        def decide():
            ok = self.save_ok is not False and self.model_file.exists()
            return ok, "" if ok else "rank 0's save failed" if self.save_ok is False else "rank 0 has no checkpoint"
        return agree(self.events, decide)

    def guard_allows(self, stage: str) -> bool:
        """checkpoint.guard: a local exists() check before the sync or before the load (agreed replaces it)."""
        if self.way.sync is AccelerateRun.sync_agreed or self.guard != stage or self.model_file.exists():
            return True
        self.events.record("skip", reason=f"no checkpoint file when it looked (checkpoint.guard={stage})")
        say("No checkpoint file: not loading.")
        return False

    def before_load(self, models, input_dir):
        """Accelerate's load pre-hook, on every rank, before it reads; models[0]: the prepared model."""
        self.read_here = True
        if self.leads is None:  # a helper's load_best: placed before it (load_led)
            self.faults.before_load()
        if not self.way.broadcast:
            self.record_load_attempt()
            return

        def read():
            self.record_load_attempt()
            return load_file(self.model_file)  # safetensors: no code runs

        self.accelerator.unwrap_model(models[0]).load_state_dict(broadcast_read(self.events, read))
        models.clear()  # loaded: Accelerate reads no model file (its docs' override)

    def record_load_attempt(self):
        size = self.model_file.stat().st_size if self.model_file.exists() else None
        self.events.record("load_attempt", path=str(self.model_file), bytes=size)


@dataclass(frozen=True)
class Way:
    """How the loop does one fix: each field one difference from the loop as the docs show it (as_shipped)."""
    sync: object = AccelerateRun.sync_none  # between the last save and the load, on every rank; False: do not load
    write: object = write_in_place  # how the writer puts model.safetensors: write(path, fill)
    save_on_each_node: bool = False  # ProjectConfiguration(save_on_each_node=True): each node's main process writes
    broadcast: bool = False  # rank 0 reads, the others get its weights through a collective
    leads: bool = False  # the helper (Rank0Leads, or yours): its save, and its load_best in place of the sync and load


# the dispatch: fix.name -> how the loop does it (framework.py names these fixes, and why it lacks others)
BY_FIX = {
    "as_shipped": Way(),
    "wait_for_everyone": Way(sync=AccelerateRun.sync_barrier),
    "save_on_each_node": Way(sync=AccelerateRun.sync_barrier, save_on_each_node=True),
    "agreed": Way(sync=AccelerateRun.sync_agreed),  # its decision replaces checkpoint.guard's exists() check
    "broadcast": Way(broadcast=True),
    "poll": Way(sync=AccelerateRun.sync_file),
    "atomic": Way(sync=AccelerateRun.sync_file, write=atomic_write),
    "rank0_leads": Way(leads=True),
    "own": Way(leads=True),  # a class of yours with Rank0Leads's methods (framework.py's own_bases)
}
