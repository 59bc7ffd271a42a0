# transformers_best_not_on_node.py [save_on_each_node | save_only_model]
#   one host:  torchrun --standalone --nproc_per_node=2 transformers_best_not_on_node.py
#   two nodes: torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 \
#              transformers_best_not_on_node.py   (on each node; here two agents side by side on one host)
# transformers and torch only. The best evaluation is the first; load_best_model_at_end=True; save_on_each_node
# and save_only_model are left at their defaults (False) unless the argument names one. Each rank has its own
# disk (no shared filesystem): the folder disk<rank>/ stands for it.
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from transformers import Trainer, TrainingArguments


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 2)

    def forward(self, x, labels=None):
        logits = self.linear(x)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
data = [{"x": torch.randn(8), "labels": torch.tensor(i % 2)} for i in range(64)]
evals = iter(range(100))
args = TrainingArguments(output_dir=f"disk{rank}/out",  # this rank's own disk
                         save_on_each_node="save_on_each_node" in sys.argv,
                         save_only_model="save_only_model" in sys.argv,
                         eval_strategy="epoch", save_strategy="epoch", load_best_model_at_end=True,
                         metric_for_best_model="score", greater_is_better=True, num_train_epochs=3,
                         learning_rate=0.1, per_device_train_batch_size=8, use_cpu=True, ddp_backend="gloo",
                         report_to=[], disable_tqdm=True, logging_strategy="no")
trainer = Trainer(model=Model(), args=args, train_dataset=data, eval_dataset=data,
                  compute_metrics=lambda p: {"score": -next(evals)})  # the first evaluation is the best
trainer.train()
mine = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
theirs = [torch.zeros_like(mine) for _ in range(2)]
dist.all_gather(theirs, mine)
best = trainer.state.best_model_checkpoint
print(f"rank {rank}: best_model_checkpoint={best}, "
      f"weights file there: {best is not None and os.path.exists(os.path.join(best, 'model.safetensors'))}, "
      f"replicas equal: {torch.equal(theirs[0], theirs[1])}", flush=True)
dist.destroy_process_group()
