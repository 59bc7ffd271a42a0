"""The framework axis: one package per framework, each implementing one contract (base.py's Framework), found
through the entry points `race_lab.frameworks` (registry.py), race-lab's own and any package of yours.

  fastai/        SaveModelCallback(every='improvement'), the seed (its fixes: fastai/callbacks.py)
  lightning/     ModelCheckpoint(save_top_k=1) and validate(ckpt_path="best"); fit(ckpt_path="last")
  transformers/  Trainer with TrainingArguments(load_best_model_at_end=True); resume_from_checkpoint
  accelerate/    Accelerator.save_state of the best, load_state at the end; load_state at every start
  torch_loop/    no framework: a DDP loop that only resumes (workload=resume), with async saves
  deepspeed/     ZeRO's save_checkpoint and load_checkpoint with its `latest` tag (workload=resume)

Each package's framework.py declares the contract and imports nothing of its framework (the launcher reads it);
its workload modules (load_best.py, resume.py) train, save and load with the framework's own code, call
train/faults.py's points at its public seams and record the events train/judge/ reads. Each workload module's
BY_FIX is how it does each fix the contract names (tests/unit/frameworks/test_fix_support.py holds the two together).
"""
from train.frameworks.base import CAPABILITIES, WORKLOADS, Framework, OwnBase
from train.frameworks.registry import NotAFramework

__all__ = ["CAPABILITIES", "WORKLOADS", "Framework", "NotAFramework", "OwnBase"]
