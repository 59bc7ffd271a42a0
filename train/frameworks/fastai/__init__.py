"""fastai: SaveModelCallback(every='improvement') saves the best on rank 0 and every rank loads it at the end
(the seed). Its fixes are SaveModelCallback subclasses (callbacks.py)."""
from train.frameworks.fastai.load_best import fit_and_load

__all__ = ["fit_and_load"]
