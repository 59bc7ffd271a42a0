"""Accelerate's write seam: where its save pre-hook writes the model file itself (both workloads); and fix=rank0_leads's
helper as both workloads observe it."""
import os
from pathlib import Path

from accelerate.utils import SAFE_WEIGHTS_NAME
from safetensors.torch import save as safetensors_bytes

from train.fixes import SyncFailed, watched
from train.frameworks.accelerate.rank0_leads import Rank0Leads


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


class ObservedRank0Leads(Rank0Leads):
    """fix=rank0_leads as the adapter runs it: the file users copy (rank0_leads.py), with its collectives watched
    (fixes.watched: sync events, and a hang seen at once), rank 0's read recorded (load_attempt) and its deletions
    (rotate)."""

    def __init__(self, accelerator, model, events):
        super().__init__(accelerator, model)
        self.events = events

    def broadcast_from_rank0(self, value):
        box = []
        if not watched(self.events, "broadcast", lambda: box.append(super(ObservedRank0Leads, self)
                                                                   .broadcast_from_rank0(value))):
            raise SyncFailed
        return box[0]

    def wait_for_all(self):
        if not watched(self.events, "barrier", super().wait_for_all):
            raise SyncFailed

    def read_weights(self, path) -> dict:
        self.events.record("load_attempt", path=str(path), bytes=os.path.getsize(path) if os.path.exists(path) else None)
        return super().read_weights(path)

    def delete(self, folder):
        self.events.record("rotate", path=str(folder))
        super().delete(folder)
