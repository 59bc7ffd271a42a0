"""Lightning: ModelCheckpoint(save_top_k=1) and validate(ckpt_path="best") (load_best.py); fit(ckpt_path="last")
at the start of every attempt (resume.py). Both write through the seam in seams.py. A class of yours written
against the lightning package's lightning.pytorch runs either workload under that Trainer (lightning_package.py).

Importing the package imports only its contract (framework.py), never the framework."""
from train.frameworks.lightning.framework import Lightning

__all__ = ["Lightning"]
