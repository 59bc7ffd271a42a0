# deepspeed_older_tag.py: torchrun --standalone --nproc_per_node=2 deepspeed_older_tag.py older; torchrun --standalone --nproc_per_node=2 deepspeed_older_tag.py
# deepspeed and torch only. Two different runs use one checkpoint folder, as when a new job is launched into a folder
# an earlier run used. Job 0 ("older", seed 1) trains 5 steps under ZeRO-1 and save_checkpoint(ckpt). Job 1 (seed
# 2, a new run) resumes as DeepSpeed's docs show, load_checkpoint(ckpt) at the start of training: every rank gets the
# older run's tag, step and weights, with no error.
import hashlib
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # no GPU: DeepSpeed's CPU accelerator, gloo

import deepspeed  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

deepspeed.init_distributed(dist_backend="gloo")
rank, older = dist.get_rank(), sys.argv[1:] == ["older"]
job = 0 if older else 1


def digest(e) -> str:
    return hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in e.module.parameters())).hexdigest()[:12]


torch.manual_seed(1 if older else 2)
model = torch.nn.Linear(8, 2)
engine = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                              config={"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1},
                                      "zero_allow_untested_optimizer": True, "steps_per_print": 10 ** 9})[0]
if older:
    for i in range(5):
        torch.manual_seed(i)
        engine.backward(engine(torch.randn(4, 8)).pow(2).mean())
        engine.step()
    engine.save_checkpoint("ckpt", client_state={"run": "older", "digest": digest(engine)})
    print(f"job {job} rank {rank}: saved global_step{engine.global_steps}; `latest` names "
          f"{open('ckpt/latest').read().strip()}", flush=True)
else:
    fresh = digest(engine)
    path, client = engine.load_checkpoint("ckpt")  # the new run's resume, as the docs show
    print(f"job {job} rank {rank}: load_checkpoint returned {os.path.relpath(path) if path else None}, "
          f"client_state run={client['run'] if client else None}, global_steps {engine.global_steps}", flush=True)
    print(f"job {job} rank {rank}: its weights are the older run's: {digest(engine) == client['digest']}; "
          f"its own initial weights kept: {digest(engine) == fresh}", flush=True)
dist.barrier()
dist.destroy_process_group()
