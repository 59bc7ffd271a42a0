"""Lightning: ModelCheckpoint(save_top_k=1) and validate(ckpt_path="best") (load_best.py); fit(ckpt_path="last")
at the start of every attempt (resume.py). Both write through the seam in seams.py."""
from train.frameworks.lightning.load_best import fit_and_load
from train.frameworks.lightning.resume import fit_and_resume

__all__ = ["fit_and_load", "fit_and_resume"]
