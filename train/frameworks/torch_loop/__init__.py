"""No framework: a plain DDP loop that only resumes (workload=resume), with the fixes written in it (resume.py).

Importing the package imports only its contract (framework.py), never the framework."""
from train.frameworks.torch_loop.framework import TorchLoop

__all__ = ["TorchLoop"]
