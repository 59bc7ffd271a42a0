# torch_dcp_group.py: torchrun --standalone --nproc_per_node=2 torch_dcp_group.py MODE
# torch only. dcp.async_save runs its save's collectives (the plan's gather and scatter, the commit's) in a thread of
# its own. Each mode puts another thread's collective on the same gloo group, as a training loop does:
#   shared:    async_save on the default group, then the loop's dist.barrier() on it;
#   overlap:   two async_saves at once (the model's, then the optimizer's) on one group of the saves' own;
#   own_group: the control: async_save on a group of its own, the barrier on the default group, one save at a time.
# gloo pairs collectives by the order each rank issued them, so the repro makes that order differ across the ranks,
# as two threads may on any run: a hold in create_local_plan (just before the save's first collective) keeps the
# save behind the other collective on rank 0 and ahead of it on rank 1. The 1-s waits are margins for a thread to
# reach gloo; nothing else depends on time. Every group has a 10-s timeout, so a hang ends.
import datetime
import os
import sys
import threading

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

TIMEOUT = datetime.timedelta(seconds=10)
dist.init_process_group("gloo", timeout=TIMEOUT)
rank, mode = dist.get_rank(), sys.argv[1]
own = dist.new_group(backend="gloo", timeout=TIMEOUT)


class Held(DefaultSavePlanner):
    """Waits for `go` before the save's first collective; sets `planned` once past it (+1 s)."""

    def __init__(self, go):
        super().__init__()
        self.go, self.planned = go, threading.Event()

    def create_local_plan(self):
        self.go.wait()
        plan = super().create_local_plan()
        threading.Timer(1, self.planned.set).start()
        return plan


def then(event):  # an event set 1 s after this call
    threading.Timer(1, event.set).start()
    return event


ready = threading.Event()
model = {f"model.rank{rank}": torch.ones(4)}
optim = {f"optim.rank{rank}.m": torch.zeros(4), f"optim.rank{rank}.v": torch.zeros(4)}
print(f"rank {rank}: {mode}", flush=True)
try:
    if mode == "overlap":
        a, b = Held(threading.Event()), Held(threading.Event())
        (a if rank == 0 else b).go.set()  # rank 0: the model's save first; rank 1: the optimizer's first
        fa = dcp.async_save(model, checkpoint_id="ckpt/model", planner=a, process_group=own)
        fb = dcp.async_save(optim, checkpoint_id="ckpt/optim", planner=b, process_group=own)
        first = a if rank == 0 else b
        first.planned.wait()
        (b if rank == 0 else a).go.set()
        fa.result(), fb.result()
    else:
        planner = Held(threading.Event())
        group = None if mode == "shared" else own
        future = dcp.async_save(model, checkpoint_id="ckpt/model", planner=planner, process_group=group)
        if rank == 0:
            then(planner.go)  # rank 0: the barrier first, then the save's collective
        else:
            planner.go.set()
            planner.planned.wait()  # rank 1: the save's collective first, then the barrier
        dist.barrier()
        future.result()
    if rank == 0:
        names = sorted(dcp.FileSystemReader("ckpt/model").read_metadata().state_dict_metadata)
        print(f"rank 0: every save returned; ckpt/model/.metadata names {', '.join(names)}", flush=True)
except Exception as e:
    print(f"rank {rank}: failed: {type(e).__name__}", flush=True)  # rank 0 timed out in gloo here
    os._exit(1)  # a save thread may still wait on gloo: leave at once
dist.destroy_process_group()
