# torch_dcp_overwrite.py: torchrun --standalone --nproc_per_node=2 torch_dcp_overwrite.py 1; torchrun
#   --standalone --nproc_per_node=2 torch_dcp_overwrite.py 2; torchrun --standalone --nproc_per_node=2
#   torch_dcp_overwrite.py load
# torch only. Every save goes into one folder, last/, over the one before (FileSystemWriter's default, overwrite=True).
# Job 1 saves step 1 (dcp.async_save, then its Future). Job 2 saves step 2 over it: rank 0 writes its file, and rank 1
# is SIGKILLed (OOM killer, preemption) before it writes its own; it waits for rank 0's file first, so this does not
# depend on timing. Job 3, the restart, loads last/ with dcp.load.
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

dist.init_process_group("gloo")
rank, job = dist.get_rank(), sys.argv[1]


class Disk(dcp.FileSystemWriter):
    def write_data(self, plan, planner):
        if job == "2" and rank == 1:
            while not os.path.exists("rank0_wrote_step2"):
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
        written = super().write_data(plan, planner)
        if job == "2" and rank == 0:
            written.wait()
            open("rank0_wrote_step2", "w").close()
        return written


if job == "load":
    state = {"rank0": torch.zeros(4), "rank1": torch.zeros(4)}
    dcp.load(state, checkpoint_id="last")
    print(f"job 3 rank {rank}: dcp.load(last) returned; rank0's tensor is step {int(state['rank0'][0])}, rank1's "
          f"step {int(state['rank1'][0])}", flush=True)
else:
    step = int(job)
    dcp.async_save({f"rank{rank}": torch.full((4,), float(step))}, storage_writer=Disk("last")).result()
    print(f"job {step} rank {rank}: saved step {step} into last/", flush=True)
dist.destroy_process_group()
