"""fastai: SaveModelCallback(every='improvement') keeps the best model on rank 0 and every rank loads
it when fit ends (the seed). The fixes are SaveModelCallback subclasses in train/frameworks/fastai/callbacks.py, named
by fix._target_ (a class of your own works too: a SaveModelCallback subclass taking the same
arguments, see examples/). fix=rank0_leads is rank0_leads.py, the callback users copy (fastai's public API only),
observed by observed.py."""
import fastai.callback.progress  # noqa: F401  (adds Learner.no_bar)
import fastai.callback.schedule  # noqa: F401  (adds Learner.fit_one_cycle)
from fastai.learner import Learner
from fastai.layers import SimpleCNN
from fastai.losses import CrossEntropyLossFlat
from fastai.metrics import accuracy
from fastai.torch_core import set_seed

import train.frameworks.fastai.callbacks  # noqa: F401  (the fixes, imported once in the forkserver's preload)
from train.frameworks.fastai.observed import callback_for  # fix=rank0_leads, or a copy of it (fix=own)
from train.frameworks.fastai.data import CHANNELS, make_dls
from train.frameworks.fastai.gloo import distrib_ctx
from train.frameworks.base import CLASS_NAMED
from train.toolkit.rank import Rank, checkpoint_dir, named_class


BY_FIX = CLASS_NAMED  # the dispatch: each fix is the SaveModelCallback subclass fix._target_ names (callbacks.py)


def epoch_table(learn):
    """fastai's per-epoch table without the progress bar, whose carriage returns garble a log file."""
    def log(values):
        if not getattr(log, "started", False):
            log.started = True
            print("  ".join(f"{name:<10}" for name in learn.recorder.metric_names), flush=True)
        print("  ".join(f"{v:<10.6f}" if isinstance(v, float) else f"{v!s:<10}" for v in values), flush=True)
    return log


def fit_and_load(rank: Rank):
    cfg = rank.cfg
    set_seed(cfg["seed"])
    learn = Learner(make_dls(cfg["data"], cfg["seed"], rank.device),
                    SimpleCNN((CHANNELS[cfg["data"]["name"]], 16, 16, 2)),  # the seed's simple_cnn((3,16,16,2))
                    loss_func=CrossEntropyLossFlat(), metrics=accuracy,
                    path=rank.run_dir, model_dir=checkpoint_dir(cfg))
    save_model_cb = callback_for(named_class(cfg["fix"]["_target_"]))(
        rank.events, rank.faults, cfg["checkpoint"], timeout_s=cfg["timeout"]["collective_s"], **cfg["fix"]["kwargs"])

    learn.logger = epoch_table(learn)
    with distrib_ctx(learn, rank.plan["device"], rank.plan["backend"]), learn.no_bar():
        learn.fit_one_cycle(cfg["epochs"], cfg["lr"], cbs=save_model_cb)
