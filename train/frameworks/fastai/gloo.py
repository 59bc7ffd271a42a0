"""fastai 2.8's distributed training, made to run on CPU ranks over gloo too.

fastai's `Learner.distrib_ctx` assumes CUDA and NCCL in three places:
1. Accelerate picks its multi-CPU (gloo) mode only when given `cpu=True`; without it
   it silently trains undistributed.
2. `sync_bn=True` turns BatchNorm into SyncBatchNorm, which takes only CUDA tensors.
3. `DistributedDL._broadcast` moves the batch indices to CUDA before broadcasting
   ("nccl only works with cuda tensors").
`distrib_ctx` passes 1 and 2 as fastai's own arguments and, for a backend other than
NCCL only, broadcasts the indices from a CPU tensor while the context is open.
On CUDA with NCCL it is fastai's `distrib_ctx` unchanged.
"""
from contextlib import contextmanager

import torch
from fastai.distributed import DistributedDL


def _broadcast_on_cpu(self, t, rank):
    t = torch.tensor(t, dtype=torch.long)
    torch.distributed.broadcast(t, rank)
    return t.tolist()


@contextmanager
def distrib_ctx(learn, device: str, backend: str):
    on_nccl = backend == "nccl"
    original = DistributedDL._broadcast
    if not on_nccl:
        DistributedDL._broadcast = _broadcast_on_cpu
    try:
        with learn.distrib_ctx(cpu=device == "cpu", sync_bn=on_nccl):
            yield learn
    finally:
        DistributedDL._broadcast = original
