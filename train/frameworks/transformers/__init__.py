"""The Trainer: TrainingArguments(load_best_model_at_end=True) (load_best.py); resume_from_checkpoint at the
start of every attempt (resume.py). The model and data both use: model.py."""
from train.frameworks.transformers.load_best import fit_and_load
from train.frameworks.transformers.resume import fit_and_resume

__all__ = ["fit_and_load", "fit_and_resume"]
