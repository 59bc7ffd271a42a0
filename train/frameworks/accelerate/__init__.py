"""Accelerate: save_state of the best, load_state at the end (load_best.py); load_state at the start of every
attempt (resume.py).

Importing the package imports only its contract (framework.py), never the framework."""
from train.frameworks.accelerate.framework import Accelerate

__all__ = ["Accelerate"]
