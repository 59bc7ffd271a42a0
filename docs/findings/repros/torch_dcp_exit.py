# torch_dcp_exit.py: torchrun --standalone --nproc_per_node=2 torch_dcp_exit.py [fixed]; python torch_dcp_exit.py check
# torch only. Two ranks save step1 with dcp.async_save on a gloo group of the save's own, each its own tensor; rank
# 0's write of its file takes 2 s (a slow disk). The script then ends as most do, without waiting for the Future:
# dist.destroy_process_group(), return. With `fixed`, it waits for the Future (and a barrier) first. `check`, one
# process after torchrun (so after every thread), reads what ckpt/step1/.metadata names.
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

if sys.argv[1:] == ["check"]:
    names = (sorted(dcp.FileSystemReader("ckpt/step1").read_metadata().state_dict_metadata)
             if os.path.exists("ckpt/step1/.metadata") else None)
    print(f"job 1 rank 0: after the run: ckpt/step1 is whole (a .metadata naming both ranks' tensors): "
          f"{names == ['rank0', 'rank1']}", flush=True)
    sys.exit(0)

dist.init_process_group("gloo")
rank, fixed = dist.get_rank(), sys.argv[1:] == ["fixed"]
group = dist.new_group(backend="gloo")


class SlowDisk(dcp.FileSystemWriter):
    def write_data(self, plan, planner):
        if rank == 0:
            time.sleep(2)
        return super().write_data(plan, planner)


future = dcp.async_save({f"rank{rank}": torch.ones(4)}, storage_writer=SlowDisk("ckpt/step1"), process_group=group)
if fixed:
    future.result()
    dist.barrier()
dist.destroy_process_group()
print(f"job 0 rank {rank}: returns {'after step1 is durable' if fixed else 'without waiting for step1'}", flush=True)
