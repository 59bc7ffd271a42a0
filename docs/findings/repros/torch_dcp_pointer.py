# torch_dcp_pointer.py: torchrun --standalone --nproc_per_node=2 torch_dcp_pointer.py [fixed]; torchrun
#   --standalone --nproc_per_node=2 torch_dcp_pointer.py resume
# torch only. Two ranks save with dcp.async_save (a gloo group of the save's own), each its own tensor. step0 is saved,
# its Future awaited, and named in ckpt/latest. Then step1 is dispatched, rank 0's write of its file is slow (a slow
# disk, held here until the kill), rank 0 names step1 in `latest` at once, as after a synchronous save, and is
# SIGKILLed (OOM killer, preemption) while step1 is in flight. `resume` (the restart) loads what `latest` names.
# With `fixed`, `latest` would be written only after step1's Future and a barrier, which the kill never lets come.
import os
import signal
import sys
import threading

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

dist.init_process_group("gloo")
rank, mode = dist.get_rank(), sys.argv[1:]
group = dist.new_group(backend="gloo")  # the save's own group: its collectives meet no other thread's
never = threading.Event()


class SlowDisk(dcp.FileSystemWriter):
    def write_data(self, plan, planner):
        if rank == 0 and self.path.name == "step1":
            never.wait()  # still writing when the kill comes
        return super().write_data(plan, planner)


if mode == ["resume"]:
    tag = open("ckpt/latest").read()
    print(f"job 1 rank {rank}: `latest` names {tag}; ckpt/{tag}/.metadata there: "
          f"{os.path.exists(f'ckpt/{tag}/.metadata')}", flush=True)
    loaded = {f"rank{rank}": torch.zeros(4)}
    try:
        dcp.load(loaded, checkpoint_id=f"ckpt/{tag}", process_group=group)
    except BaseException as e:  # dcp's CheckpointException is a BaseException
        print(f"job 1 rank {rank}: dcp.load(ckpt/{tag}) failed: {type(e).__name__}", flush=True)
        raise
    print(f"job 1 rank {rank}: resumed from {tag}, step {int(loaded[f'rank{rank}'][0])}", flush=True)
    dist.destroy_process_group()
    sys.exit(0)

dcp.async_save({f"rank{rank}": torch.zeros(4)}, storage_writer=SlowDisk("ckpt/step0"), process_group=group).result()
if rank == 0:
    open("ckpt/latest", "w").write("step0")
dist.barrier()
future = dcp.async_save({f"rank{rank}": torch.ones(4)}, storage_writer=SlowDisk("ckpt/step1"), process_group=group)
if rank == 0:
    if mode != ["fixed"]:
        open("ckpt/latest", "w").write("step1")  # named at once
    print(f"job 0 rank 0: step1 dispatched; `latest` names {open('ckpt/latest').read()}; SIGKILL", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
never.wait()  # rank 1: stopped by torchrun once rank 0 is gone
