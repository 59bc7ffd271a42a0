# transformers_torn_resume.py:
#   TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node=2 --max-restarts=2 \
#   transformers_torn_resume.py
# transformers and torch only. The Trainer saves checkpoint-<step>/ every epoch, and every attempt resumes from
# get_last_checkpoint(output_dir), as the example scripts do. In the first attempt rank 0 is SIGKILLed inside the
# second save, right after model.safetensors, whose first half it leaves (a kill mid-write).
import os
import signal

import torch
import torch.distributed as dist
from torch import nn
from transformers import Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

OUT = "out"
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 2)

    def forward(self, x, labels=None):
        logits = self.linear(x)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


class Killed(Trainer):
    def save_model(self, output_dir=None, _internal_call=False):
        super().save_model(output_dir, _internal_call)
        if attempt == 0 and self.args.process_index == 0 and self.state.epoch == 2:
            weights = os.path.join(output_dir, "model.safetensors")
            os.truncate(weights, os.path.getsize(weights) // 2)
            os.kill(os.getpid(), signal.SIGKILL)  # the rest of _save_checkpoint never runs


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
data = [{"x": torch.randn(8), "labels": torch.tensor(i % 2)} for i in range(64)]
args = TrainingArguments(output_dir=OUT, save_strategy="epoch", num_train_epochs=3, per_device_train_batch_size=8,
                         use_cpu=True, report_to=[], disable_tqdm=True, logging_strategy="no")
trainer = Killed(model=Model(), args=args, train_dataset=data)
last = get_last_checkpoint(OUT) if os.path.isdir(OUT) else None
print(f"attempt {attempt} rank {rank}: resuming from {last}", flush=True)
try:
    trainer.train(resume_from_checkpoint=last)  # True would raise ValueError on a fresh start
except Exception as e:
    print(f"attempt {attempt} rank {rank}: train() failed: {type(e).__name__}: {e}", flush=True)
    raise
print(f"attempt {attempt} rank {rank}: finished", flush=True)
dist.destroy_process_group()
