"""DeepSpeed (0.19.8): ZeRO's save_checkpoint/load_checkpoint with its `latest` tag, resumed at every attempt
(resume.py); workload=resume only (load_best: n/a, configs/framework/deepspeed.yaml says why)."""
import os

import torch

if not torch.cuda.is_available():  # before deepspeed is imported: its CPU accelerator, and gloo (field notes)
    os.environ.setdefault("DS_ACCELERATOR", "cpu")

from train.frameworks.deepspeed.resume import fit_and_resume  # noqa: E402 (DS_ACCELERATOR first)

__all__ = ["fit_and_resume"]
