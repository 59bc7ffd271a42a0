"""A CheckpointIO of your own, for Lightning: the shipped save and load (TorchCheckpointIO), and a load that
waits for the file when it is not there yet (up to WAIT_S), as a user might add for a slow shared disk.

Put it in with `framework=lightning fix=own fix._target_=my_checkpoints.lightning_io.PatientCheckpointIO`:
race-lab runs it as Lightning's checkpoint plugin, under its own observation and faults (its calls reach these
methods first). It must subclass TorchCheckpointIO and take no constructor arguments.
What it shows: Lightning's barrier after the save already holds a late rank 0 (seed, stale), so the wait never
waits; a failed save (save_fails) is not something waiting can mend.
"""
import os
import time

from pytorch_lightning.plugins import TorchCheckpointIO

WAIT_S = 5.0


class PatientCheckpointIO(TorchCheckpointIO):
    def load_checkpoint(self, path, map_location=None, weights_only=None):
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.1)
        print(f"PatientCheckpointIO: loading {os.path.basename(path)}", flush=True)
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
