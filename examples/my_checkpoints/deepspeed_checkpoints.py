"""Save and resume around DeepSpeed's engine, as many loops write them: the interface of docs/fixes/deepspeed.md's
Rank0LeadsCheckpoints (built with the folder; save(engine, epoch) and resume(engine) on every rank, resume returning
the client state loaded or None).

NewestFolderCheckpoints races: it saves as DeepSpeed's docs show, and resumes from the newest global_step<N> folder
it lists (as users do when they do not trust `latest`, or have none): a rank killed before its ZeRO partition
landed, or halfway through the model file, leaves a newest folder without it, and every resume fails on that file.
WholeFolderCheckpoints is the same class whose resume rank 0 leads: it takes the newest folder that holds the model
file and every rank's partition, and sends its name to every rank. Run either with:

    race-lab check framework=deepspeed fix=own fix._target_=my_checkpoints.deepspeed_checkpoints.NewestFolderCheckpoints
"""
import re
from pathlib import Path

import torch.distributed as dist

TAG = re.compile(r"^global_step(\d+)$")


class NewestFolderCheckpoints:
    def __init__(self, folder):
        self.folder = Path(folder)

    def save(self, engine, epoch: int):
        engine.save_checkpoint(str(self.folder), client_state={"epoch": epoch})

    def newest_first(self) -> list:
        found = [(int(m.group(1)), p) for p in self.folder.iterdir() if (m := TAG.match(p.name))] \
            if self.folder.is_dir() else []
        return [p for _, p in sorted(found, reverse=True)]

    def pick(self):
        found = self.newest_first()
        return found[0].name if found else None

    def resume(self, engine):
        tag = self.pick()
        if tag is None:
            return None
        _, client = engine.load_checkpoint(str(self.folder), tag=tag)
        return client


class WholeFolderCheckpoints(NewestFolderCheckpoints):
    def whole(self, folder: Path) -> bool:
        names = {p.name for p in folder.iterdir()}
        return "mp_rank_00_model_states.pt" in names and all(
            f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" in names for r in range(dist.get_world_size()))

    def pick(self):
        picked = [None]
        if dist.get_rank() == 0:
            picked[0] = next((p.name for p in self.newest_first() if self.whole(p)), None)
        dist.broadcast_object_list(picked, src=0)  # every rank takes rank 0's pick
        return picked[0]
