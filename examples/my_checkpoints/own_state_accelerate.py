"""An Accelerate checkpoint helper of a team's own, with the three methods of race-lab's Rank0Leads (save, load_best,
resume) and written as Accelerate's docs show: save_state on every process (the main process writes the model), the
best folder's load_state on every process when training ends, and load_state() of the newest checkpoint at the start.
StateSaver has nothing between rank 0's write and the other processes' load_state: one that comes early reads the
folder as it was before (a race). SyncedStateSaver calls accelerator.wait_for_everyone() after the save."""
import os
import re

CHECKPOINT = re.compile(r"^checkpoint_([0-9]+)$")  # ProjectConfiguration(automatic_checkpoint_naming=True)'s folders


class StateSaver:
    synced = False

    def __init__(self, accelerator, model):
        self.accelerator, self.model = accelerator, model

    def save(self, output_dir=None):
        self.accelerator.save_state(output_dir)
        if self.synced:
            self.accelerator.wait_for_everyone()

    def load_best(self, input_dir):
        self.accelerator.load_state(input_dir)
        return {"loaded": True, "path": os.path.join(input_dir, "model.safetensors"), "why": ""}

    def resume(self):
        """The newest checkpoint_<i>, loaded (None: none yet); the next save is checkpoint_<i+1>."""
        folder = os.path.join(self.accelerator.project_dir, "checkpoints")
        numbers = sorted(int(m.group(1)) for m in map(CHECKPOINT.match, os.listdir(folder) if os.path.isdir(folder)
                                                     else []) if m)
        if not numbers:
            return None
        self.accelerator.load_state()  # the newest, by its number
        self.accelerator.project_configuration.iteration = numbers[-1] + 1
        return os.path.join(folder, f"checkpoint_{numbers[-1]}")


class SyncedStateSaver(StateSaver):
    """The same, with every process waiting for the others after the save."""
    synced = True
