"""The Trainer: TrainingArguments(load_best_model_at_end=True) (load_best.py); resume_from_checkpoint at the
start of every attempt (resume.py). The model and data both use: model.py.

Importing the package imports only its contract (framework.py), never the framework."""
from train.frameworks.transformers.framework import Transformers

__all__ = ["Transformers"]
