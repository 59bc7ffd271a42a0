"""Ray Train: TorchTrainer's workers report a checkpoint every epoch, each uploading its own part into one folder,
and resume after Ray restarts them (workload=resume, resume.py; driver.py starts Ray and the trainer).

Importing the package imports only its contract (framework.py), never the framework."""
from train.frameworks.ray_train.framework import RayTrain

__all__ = ["RayTrain"]
