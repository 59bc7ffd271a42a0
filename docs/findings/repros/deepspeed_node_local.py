# deepspeed_node_local.py: torchrun --standalone --nproc_per_node=2 deepspeed_node_local.py [use_node_local_storage]
# deepspeed and torch only. Two ranks train a small model under ZeRO-1 and save_checkpoint(dir) where each rank's
# node keeps its own disk (here: a folder of each rank's own, node<rank>/). Then, as after a restart, a fresh engine
# on each rank resumes with load_checkpoint(dir), as the docs show, and trains one more step. With the argument
# use_node_local_storage, DeepSpeed's checkpoint setting for disks that are not shared is on.
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # no GPU: DeepSpeed's CPU accelerator, gloo

import deepspeed  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

deepspeed.init_distributed(dist_backend="gloo")
rank = dist.get_rank()
disk = f"node{rank}"  # this node's own disk


def engine():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    config = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1},
              "zero_allow_untested_optimizer": True, "steps_per_print": 10 ** 9,
              "checkpoint": {"use_node_local_storage": sys.argv[1:] == ["use_node_local_storage"]}}
    return deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                config=config)[0]


def step(e):
    torch.manual_seed(e.global_steps)
    e.backward(e(torch.randn(4, 8)).pow(2).mean())
    e.step()


first = engine()
for _ in range(5):
    step(first)
first.save_checkpoint(disk)
tag = f"global_step{first.global_steps}"
print(f"rank {rank}: {disk}/ holds {', '.join(sorted(os.listdir(disk)))}; {tag}/ holds "
      f"{', '.join(sorted(os.listdir(os.path.join(disk, tag))))}", flush=True)

resumed = engine()  # the restart
path, client = resumed.load_checkpoint(disk)
print(f"rank {rank}: load_checkpoint returned {'None' if path is None else os.path.relpath(path)}", flush=True)
step(resumed)
print(f"rank {rank}: global_steps {resumed.global_steps} after one more step", flush=True)
dist.barrier()
dist.destroy_process_group()
