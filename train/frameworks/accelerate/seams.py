"""Accelerate's write seam: where its save pre-hook writes the model file itself (both workloads); and the checkpoint
helper both workloads call for fix=rank0_leads and fix=own, as they observe it."""
import os
from pathlib import Path

from accelerate.utils import SAFE_WEIGHTS_NAME
import torch.distributed as dist
from safetensors.torch import save as safetensors_bytes

from train.fixes import SyncFailed, watched
from train.frameworks.accelerate.rank0_leads import Rank0Leads
from train.toolkit.rank import named_class


def write_model_file(weights: list, output_dir, write, fault):
    """In Accelerate's save pre-hook (register_save_state_pre_hook), on the writer: the bytes Accelerate would write
    for the model (safetensors, with its metadata) go to <output_dir>/model.safetensors through write(path, fill)
    (toolkit.resume.write_in_place, or a fix's fixes.atomic_write), the file filled by fault(f, data), a point of
    train/faults.py; then `weights` is emptied, so that Accelerate writes no model file (the override its docs
    describe). Without it the write point is lost: a fault in the write (torn, save_fails, kill_at=mid_write) or a
    fix's own write would have no place in Accelerate's save."""
    data = safetensors_bytes(weights[0], metadata={"format": "pt"})
    write(Path(output_dir) / SAFE_WEIGHTS_NAME, lambda f: fault(f, data))
    weights.clear()


class Observed:
    """Mixed in before the helper that runs (fix=rank0_leads's Rank0Leads, or a class of yours, fix=own): where it has
    Rank0Leads's small methods, its collectives are watched (fixes.watched: sync events, a hang seen at once), rank 0's
    read is recorded (load_attempt) and its deletions (rotate); `received` says a peer's object reached this rank
    through its broadcast. A class without those methods is run as it is: what it does to the files is seen through
    Accelerate's hooks and the rank's file watch."""

    observed_events = None  # the rank's event log, set once the helper is built
    received = False

    def broadcast_from_rank0(self, value):
        box = []
        if not watched(self.observed_events, "broadcast", lambda: box.append(super(Observed, self)
                                                                            .broadcast_from_rank0(value))):
            raise SyncFailed
        self.received = dist.is_initialized() and dist.get_rank() != 0
        return box[0]

    def wait_for_all(self):
        if not watched(self.observed_events, "barrier", super().wait_for_all):
            raise SyncFailed

    def read_weights(self, path) -> dict:
        self.observed_events.record("load_attempt", path=str(path),
                                    bytes=os.path.getsize(path) if os.path.exists(path) else None)
        return super().read_weights(path)

    def delete(self, folder):
        self.observed_events.record("rotate", path=str(folder))
        super().delete(folder)


def observed_helper(fix: dict, accelerator, model, events):
    """The checkpoint helper both workloads call: fix=own's class (fix._target_, built with fix.kwargs) or
    Rank0Leads, under Observed."""
    helper = named_class(fix["_target_"]) if fix["name"] == "own" else Rank0Leads
    built = type(f"Observed{helper.__name__}", (Observed, helper), {})(accelerator, model, **fix["kwargs"])
    built.observed_events = events
    return built


def kept_error(helper) -> OSError:
    """Why a helper's save returned False: the OSError it kept (Rank0Leads's `errors`), or one that says so."""
    errors = list(getattr(helper, "errors", {}).values())
    return errors[-1] if errors else OSError(f"{type(helper).__name__}.save returned False")
