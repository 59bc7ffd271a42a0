# deepspeed_latest_first.py:
#   TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node=2 --max-restarts=2 \
#   deepspeed_latest_first.py
# deepspeed and torch only. Each attempt resumes with load_checkpoint(dir) (the tag `latest` names), then trains
# and saves a checkpoint after every 5 steps, ZeRO-1, one shared folder. In the first attempt rank 1 is SIGKILLed
# (OOM killer, preemption) at its second save, before its ZeRO partition is written, once rank 0 has written its
# own files and waits in a barrier of save_checkpoint (a handshake through the file rank0_at_barrier, not a delay).
import os
import signal
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # no GPU: DeepSpeed's CPU accelerator, gloo
import deepspeed  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
deepspeed.init_distributed(dist_backend="gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
config = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1},
          "zero_allow_untested_optimizer": True, "steps_per_print": 10 ** 9}
engine = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                              config=config)[0]
save, barrier, wrote = engine.checkpoint_engine.save, deepspeed.comm.barrier, []


def killed_before_its_partition(state_dict, path):
    if attempt == 0 and rank == 1 and "global_step10" in path and "optim_states" in path:
        while not os.path.exists("rank0_at_barrier"):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    save(state_dict, path)
    wrote.append(path)


def rank0_waits(*args, **kwargs):  # save_checkpoint's barriers, as engine.py calls them (deepspeed.comm.barrier)
    if attempt == 0 and rank == 0 and any("global_step10" in p and "optim_states" in p for p in wrote):
        open("rank0_at_barrier", "w").close()  # its own files are written
    return barrier(*args, **kwargs)


engine.checkpoint_engine.save = killed_before_its_partition
deepspeed.comm.barrier = rank0_waits
if os.path.exists("ckpt/latest"):
    tag = open("ckpt/latest").read()
    print(f"attempt {attempt} rank {rank}: ckpt/ holds {', '.join(sorted(os.listdir('ckpt')))}; `latest` names {tag},"
          f" which holds {', '.join(sorted(os.listdir('ckpt/' + tag)))}", flush=True)
try:
    path, _ = engine.load_checkpoint("ckpt")
except Exception as e:
    missing = os.path.basename(getattr(e, "filename", None) or "") or e
    print(f"attempt {attempt} rank {rank}: load_checkpoint failed: {type(e).__name__}: {missing}", flush=True)
    raise
print(f"attempt {attempt} rank {rank}: resumed at step {engine.global_steps}", flush=True)
while engine.global_steps < 15:
    engine.backward(engine(torch.randn(4, 8)).pow(2).mean())
    engine.step()
    if engine.global_steps % 5 == 0:
        engine.save_checkpoint("ckpt")
print(f"attempt {attempt} rank {rank}: finished at step {engine.global_steps}", flush=True)
dist.destroy_process_group()
