"""Accelerate: save_state of the best, load_state at the end (load_best.py); load_state at the start of every
attempt (resume.py)."""
from train.frameworks.accelerate.load_best import fit_and_load
from train.frameworks.accelerate.resume import fit_and_resume

__all__ = ["fit_and_load", "fit_and_resume"]
