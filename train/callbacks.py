"""The old import path of fastai's fixes, kept for users' subclasses (`train.callbacks.RaceSaveModelCallback`):
they live in train/frameworks/fastai/callbacks.py."""
from train.frameworks.fastai.callbacks import *  # noqa: F401,F403
from train.frameworks.fastai.callbacks import RaceSaveModelCallback  # noqa: F401
