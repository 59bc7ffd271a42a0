"""The Trainer's write seam (both workloads): where the bytes of model.safetensors reach the file; and fix=rank0_leads's
Trainer as both workloads observe it."""
import os

import safetensors.torch
from transformers import Trainer

from train.fixes import SyncFailed, watched
from train.frameworks.transformers.rank0_leads import Rank0LeadsTrainer


class WriteSeamTrainer(Trainer):
    """The Trainer whose save_model (its public method, on every rank) writes the model file through write_file.
    While the Trainer's own save_model runs, safetensors.torch.save_file (what Trainer._save calls on the writer for
    a plain nn.Module) is swapped for one that hands write_file the same bytes save_file would write: a public
    function of safetensors, swapped for that one call, on this rank only. Without it the write point is lost (a
    stall or an OSError in the write, rank 0 killed halfway through it, a fix's own write), and the scenarios that
    place one would be not_for transformers. A subclass says what happens around the write (before_write,
    after_write: not after a failed one) and writes the file (write_file)."""

    def save_model(self, output_dir=None, _internal_call=False):
        if not _internal_call:  # a user's own save_model call: nothing of ours
            return super().save_model(output_dir, _internal_call)
        self.before_write()
        original = safetensors.torch.save_file

        def save_file(tensors, filename, metadata=None):
            self.write_file(tensors, filename, safetensors.torch.save(tensors, metadata=metadata))  # save_file's bytes

        safetensors.torch.save_file = save_file
        try:
            super().save_model(output_dir, _internal_call)
        finally:
            safetensors.torch.save_file = original
        self.after_write()

    def before_write(self):
        pass

    def after_write(self):
        pass

    def write_file(self, tensors: dict, filename: str, data: bytes):
        """Put `data` (the safetensors bytes of `tensors`) at `filename`, on the writer."""
        raise NotImplementedError


class ObservedRank0Leads(Rank0LeadsTrainer):
    """fix=rank0_leads as the adapter runs it: the file users copy (rank0_leads.py), with its collectives watched
    (fixes.watched: sync events, and a hang seen at once) and rank 0's read recorded (load_attempt). The adapter
    sets `leads_events` (the rank's events) after construction."""
    leads_events = None

    def broadcast_from_rank0(self, value):
        box = []
        if not watched(self.leads_events, "broadcast", lambda: box.append(super(ObservedRank0Leads, self)
                                                                        .broadcast_from_rank0(value))):
            raise SyncFailed
        return box[0]

    def wait_for_all(self):
        if not watched(self.leads_events, "barrier", super().wait_for_all):
            raise SyncFailed

    def read_weights(self, path) -> dict:
        self.leads_events.record("load_attempt", path=str(path),
                                 bytes=os.path.getsize(path) if os.path.exists(path) else None)
        return super().read_weights(path)
