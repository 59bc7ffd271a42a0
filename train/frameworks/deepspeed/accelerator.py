"""DeepSpeed's CPU accelerator where no GPU is visible, set before deepspeed is imported (field notes): imported
first by every module of this package that imports deepspeed, and by the forkserver (framework.py's preload)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
