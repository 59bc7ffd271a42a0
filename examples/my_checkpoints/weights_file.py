"""A team's own weights file beside the framework's checkpoint: rank 0 exports the trained weights to
weights.pt when training ends (the export takes a while: EXPORT_S), and every rank then loads that file, so
that all end on the exported weights. With `synced` False nothing stands between rank 0's write and the other
ranks' reads: they read before the file is there (a race). With `synced` True a barrier does. The same pattern
as each framework's class in own_file_*.py; no framework is imported here."""
import os
import time

import torch
import torch.distributed as dist

EXPORT_S = 5.0  # rank 0's export before it writes: a margin far above the ranks' skew at the end of training
NAME = "weights.pt"


def export_then_load(model: torch.nn.Module, folder, synced: bool):
    """Every rank calls it with its own model; every rank ends with the weights rank 0 exported."""
    path = os.path.join(folder, NAME)
    if dist.get_rank() == 0:
        time.sleep(EXPORT_S)
        torch.save(model.state_dict(), path)
    if synced:
        dist.barrier()
    model.load_state_dict(torch.load(path, weights_only=True))
