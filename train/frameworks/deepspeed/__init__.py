"""DeepSpeed (0.19.8): ZeRO's save_checkpoint/load_checkpoint with its `latest` tag, resumed at every attempt
(resume.py); workload=resume only (framework.py says why).

Importing the package imports only its contract (framework.py), never the framework."""
from train.frameworks.deepspeed.framework import DeepSpeed

__all__ = ["DeepSpeed"]
