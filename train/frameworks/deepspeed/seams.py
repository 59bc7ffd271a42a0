"""DeepSpeed's write and read seam: the engine's checkpoint engine (engine.checkpoint_engine, DeepSpeed's pluggable
CheckpointEngine: save(state_dict, path) and load(path, map_location) for every file save_checkpoint writes and
load_checkpoint reads, on every rank). ObservedCheckpointEngine is its TorchCheckpointEngine with:
  - each ZeRO shard written recorded: shard_write{step, shard, digest} (train/judge/shards.py), and read:
    shard_read{step, shard, digest, path}, the step the tag folder names (global_step<N>);
  - loads with torch.load(weights_only=True) (DeepSpeed's own passes weights_only=False: foreign code could run),
    with only the DeepSpeed classes its files hold allowed;
  - the faults: rank 0's model file in two halves (faults.resume_write: kill_at=mid_write leaves it torn), and
    kill_at=before_shard: rank 1 is killed before its shard lands, once rank 0 has written `latest` (shard_lost).
"""
import hashlib
import io
import re
from pathlib import Path

import torch

import train.frameworks.deepspeed.accelerator  # noqa: F401  (DS_ACCELERATOR before deepspeed)
from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

SHARD = re.compile(r"^zero_pp_rank_(\d+)_mp_rank_\d+_optim_states\.pt$")  # one rank's ZeRO partition
# the module and the client state: data-parallel rank 0's; under ZeRO-3 each rank's partition of it (zero_pp_rank_<r>_)
MODEL = re.compile(r"^(zero_pp_rank_\d+_)?mp_rank_\d+_model_states\.pt$")
TAG_STEP = re.compile(r"global_step(\d+)$")  # save_checkpoint's default tag


def state_digest(state) -> str:
    """A short hash of every tensor in a nested state (dicts, lists), with the keys that lead to it."""
    h = hashlib.sha256()

    def walk(prefix, value):
        if isinstance(value, dict):
            for k in sorted(value, key=str):
                walk(f"{prefix}/{k}", value[k])
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(f"{prefix}/{i}", v)
        elif isinstance(value, torch.Tensor):
            h.update(prefix.encode())
            h.update(value.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    walk("", state)
    return h.hexdigest()[:16]


def tag_step(path) -> int:
    """The step a checkpoint file's tag folder names (global_step<N>), or -1 for another tag."""
    m = TAG_STEP.search(Path(path).parent.name)
    return int(m.group(1)) if m else -1


def safe_globals() -> list:
    """The classes DeepSpeed 0.19.8's ZeRO-1/2 files pickle besides tensors and builtins (found by loading them)."""
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, ZeroStageEnum, fragment_address]


class ObservedCheckpointEngine(TorchCheckpointEngine):
    def __init__(self, loop):
        super().__init__(None)
        self.loop = loop  # the resume loop: its events, faults, rank, step
        self.wrote, self.read = [], []  # every file saved and loaded through it, in order (own.py reads them)

    def save(self, state_dict, path: str):
        name, loop = Path(path).name, self.loop
        self.wrote.append(str(path))
        shard = SHARD.match(name)
        if shard:  # the tag: the folder it lands in, whoever named it
            loop.faults.before_shard(loop.epoch, path, loop.latest, Path(path).parent.name, loop.timeout_s)
            torch.save(state_dict, path)
            loop.events.record("shard_write", step=loop.engine.global_steps, shard=int(shard.group(1)),
                               digest=state_digest(state_dict), path=str(path))
            return
        buffer = io.BytesIO()
        torch.save(state_dict, buffer)
        data = buffer.getvalue()
        with open(path, "wb") as f:  # as torch.save would, in two halves (a kill between them leaves it torn)
            loop.faults.resume_write(f, data, loop.epoch, path)

    def commit(self, info):
        """Every rank, once its files are written; on rank 0 right before it writes `latest` (engine.py, 0.19.8)."""
        if self.loop.me == 0:
            self.loop.faults.shards_committed(self.loop.epoch, info.tag)
        return super().commit(info)

    def load(self, path: str, map_location=None):
        self.read.append(str(path))
        with torch.serialization.safe_globals(safe_globals()):
            state = torch.load(path, map_location=map_location, weights_only=True)
        shard = SHARD.match(Path(path).name)
        if shard:
            self.loop.events.record("shard_read", step=tag_step(path), shard=int(shard.group(1)),
                                    digest=state_digest(state), path=str(Path(path).parent))
        return state
