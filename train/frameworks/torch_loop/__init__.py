"""No framework: a plain DDP loop that only resumes (workload=resume), with the fixes written in it (resume.py)."""
from train.frameworks.torch_loop.resume import fit_and_resume

__all__ = ["fit_and_resume"]
