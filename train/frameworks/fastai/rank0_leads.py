"""Rank0LeadsSaveModelCallback: fastai's SaveModelCallback for distributed training, with rank 0 leading.
Copy this file into your project: it imports only fastai, torch and the standard library.

What it does
  Saves: at each improvement rank 0 alone (the process group's rank, not the RANK variable, which can be wrong)
  writes the model's state_dict to a temporary file beside <model_dir>/<fname>.pth, fsyncs it and renames it onto
  that name: a reader never sees half a file, and a failed write leaves the previous one whole. A failed save
  (a full disk) is remembered and warned about, not raised.
  When fit ends rank 0 alone decides: if its last save in this fit succeeded, it reads that file
  (weights_only=True) and sends the weights to every rank with broadcast_object_list; if not, it sends its own
  current weights and why. So every rank ends with the same weights, and says so when the save failed. No other
  rank touches the file: it needs to be only on rank 0's disk, and no rank decides from a look of its own.

Races it holds (race-lab's load_best scenarios, each run 5/5 clean; the save that fails: every rank says so):
  seed, torn, many_writers  the others wait in the broadcast until rank 0 has the whole file and has read it
  stale, skip_if_missing, disagree  no rank reads an older file or checks on its own whether the file exists
  save_fails                 every rank keeps rank 0's weights, none loads, all say the save failed
  no_shared_fs               only rank 0, which wrote it, reads the file

Use it where you used SaveModelCallback (every improvement, then the best loaded at the end):
    from rank0_leads import Rank0LeadsSaveModelCallback
    with learn.distrib_ctx():
        learn.fit_one_cycle(5, cbs=Rank0LeadsSaveModelCallback(monitor="accuracy", fname="best"))
  The file holds what learn.save writes without the optimizer (the model's state_dict): learn.load("best")
  reads it later. Every rank must run fit to its end: the broadcast is a collective.
  The small methods below (write_bytes, read_checkpoint, broadcast, loaded, not_loaded) are the places to
  put your own storage or logging.
"""
import io
import os
from pathlib import Path

import torch
import torch.distributed as dist
from fastai.callback.tracker import SaveModelCallback
from fastai.torch_core import get_model


def process_rank() -> int:
    """The process group's rank (0 without one)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class Rank0LeadsSaveModelCallback(SaveModelCallback):
    """SaveModelCallback(every improvement) whose rank 0 writes whole files and leads the load at the end."""

    def __init__(self, monitor="valid_loss", comp=None, min_delta=0., fname="model", reset_on_fit=True):
        super().__init__(monitor=monitor, comp=comp, min_delta=min_delta, fname=fname, reset_on_fit=reset_on_fit)
        self.save_error = None  # why rank 0's last save failed (None: it did not)

    def path_of(self, name) -> Path:
        return Path(self.learn.path) / self.learn.model_dir / f"{name}.pth"

    def before_fit(self):
        super().before_fit()
        self.save_error, self.last_saved_path = None, None  # a file from an earlier fit is never loaded

    # --- the save: rank 0 alone, whole or not at all ---
    def _save(self, name):
        if process_rank() != 0:
            return
        path = self.path_of(name)
        buffer = io.BytesIO()
        torch.save(self.state_to_save(), buffer)
        try:
            self.write_checkpoint(path, buffer.getvalue())
        except OSError as e:
            self.save_error = f"{type(e).__name__}: {e}"
            print(f"Saving {path} failed: {self.save_error}")
            return
        self.save_error, self.last_saved_path = None, path

    def state_to_save(self) -> dict:
        return get_model(self.learn.model).state_dict()

    def write_checkpoint(self, path: Path, data: bytes):
        """A temporary file in the same folder, fsynced, renamed onto `path`; then the folder fsynced."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            with open(tmp, "wb") as f:
                self.write_bytes(f, data)
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

    # --- the load at the end: rank 0 decides and reads, every rank takes its weights ---
    def after_fit(self, **kwargs):
        decision = self.broadcast(self.decide() if process_rank() == 0 else None)
        get_model(self.learn.model).load_state_dict(decision["state"])
        if decision["loaded"]:
            self.loaded(decision["path"])
        else:
            self.not_loaded(decision["why"])

    def decide(self) -> dict:
        """Rank 0's decision: the weights of its last save in this fit, or (when there is none) its own weights."""
        def keep(why):
            own = {k: v.detach().cpu() for k, v in get_model(self.learn.model).state_dict().items()}
            return {"loaded": False, "why": why, "path": None, "state": own}

        if self.save_error:
            return keep(f"rank 0's save failed ({self.save_error})")
        if self.last_saved_path is None:
            return keep("rank 0 saved no checkpoint in this fit")
        try:
            state = self.read_checkpoint(self.last_saved_path)
        except Exception as e:  # noqa: BLE001  (any failed read: not loaded)
            return keep(f"rank 0 could not read {self.last_saved_path} ({type(e).__name__}: {e})")
        return {"loaded": True, "why": "", "path": str(self.last_saved_path), "state": state}

    def read_checkpoint(self, path: Path) -> dict:
        return torch.load(path, map_location="cpu", weights_only=True)

    def broadcast(self, obj):
        """Rank 0's object, on every rank."""
        if not (dist.is_available() and dist.is_initialized()):
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def loaded(self, path: str):
        print(f"Loaded the best model, from rank 0's {path}.")

    def not_loaded(self, why: str):
        print(f"Not loading the best model: {why}. Every rank keeps rank 0's weights.")
