"""Lightning: ModelCheckpoint(save_top_k=1) and validate(ckpt_path="best") (load_best.py); fit(ckpt_path="last")
at the start of every attempt (resume.py). Both write through the seam in seams.py. A class of yours written
against the lightning package's lightning.pytorch runs load_best.py under that Trainer (lightning_package.py)."""
from train.frameworks.lightning.lightning_package import fit_and_load
from train.frameworks.lightning.resume import fit_and_resume

__all__ = ["fit_and_load", "fit_and_resume"]
