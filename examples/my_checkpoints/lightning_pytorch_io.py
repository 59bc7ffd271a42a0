"""lightning_io.py's CheckpointIO written against the `lightning` package (lightning.pytorch, as Lightning's docs
import it now), whose constructor takes how long its load waits for a file not there yet: race-lab builds it with
fix.kwargs, and runs it under lightning.pytorch's Trainer (a class written against pytorch_lightning runs under
that one's). From the folder that holds my_checkpoints/ (no PYTHONPATH needed):

    race-lab -m framework=lightning scenario=seed,stale,save_fails fix=own world_size=2 \\
        fix._target_=my_checkpoints.lightning_pytorch_io.PatientCheckpointIO +fix.kwargs.wait_s=5

Without +fix.kwargs.wait_s, or with a negative one, it is refused before any rank starts. What it shows is what
lightning_io.py shows: Lightning's barrier after the save already holds a late rank 0 (seed, stale); a failed save
(save_fails) is not something waiting can mend.
"""
import os
import time

from lightning.pytorch.plugins import TorchCheckpointIO


class PatientCheckpointIO(TorchCheckpointIO):
    def __init__(self, wait_s: float):
        super().__init__()
        if wait_s < 0:
            raise ValueError(f"wait_s must be >= 0, not {wait_s}")
        self.wait_s = wait_s

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        deadline = time.monotonic() + self.wait_s
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.1)
        print(f"PatientCheckpointIO (lightning.pytorch, wait_s={self.wait_s}): loading {os.path.basename(path)}",
              flush=True)
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
