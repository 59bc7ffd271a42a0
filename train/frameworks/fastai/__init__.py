"""fastai: SaveModelCallback(every='improvement') saves the best on rank 0 and every rank loads it at the end
(the seed): load_best.py. Its fixes are SaveModelCallback subclasses (callbacks.py).

Importing the package imports only its contract (framework.py), never the framework."""
from train.frameworks.fastai.framework import Fastai

__all__ = ["Fastai"]
