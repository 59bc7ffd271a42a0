"""Which Lightning runs: pytorch_lightning, or the `lightning` package's lightning.pytorch (what Lightning's docs
import now). The two are separate copies of the same code: a Trainer takes only plugins, callbacks, a strategy
and a LightningModule of its own copy. So a class of yours (fix=own) whose bases come from the lightning package
(lightning.pytorch, lightning.fabric) runs under lightning.pytorch's Trainer: load_best.py is imported a second
time, under another module name, while each pytorch_lightning and lightning_fabric module in sys.modules stands for
its lightning.pytorch or lightning.fabric twin, so its `import pytorch_lightning ...` lines bind the twins. Its
source is neither read nor changed: Python's import system does the binding (sys.modules is its public cache).
Everything else runs pytorch_lightning.
"""

import importlib
import importlib.util
import sys
import types
from contextlib import contextmanager

from train.frameworks.lightning import load_best
from train.toolkit.rank import Rank, named_class

BY_FIX = load_best.BY_FIX  # the dispatch, for either copy (test_fix_support.py reads it here)
TWINS = {"pytorch_lightning": "lightning.pytorch", "lightning_fabric": "lightning.fabric"}
UNDER_LIGHTNING = "train.frameworks.lightning.load_best_under_lightning"  # the second import's module name


def fit_and_load(rank: Rank):
    """load_best's fit_and_load, under the Lightning that the class of yours is written against."""
    module = under_lightning() if written_for_lightning(rank.cfg) else load_best
    return module.fit_and_load(rank)


def written_for_lightning(cfg: dict) -> bool:
    """Whether fix=own names a class whose bases come from the lightning package."""
    if cfg["fix"]["name"] != "own":
        return False
    return any(c.__module__.partition(".")[0] == "lightning" for c in named_class(cfg["fix"]["_target_"]).__mro__)


@contextmanager
def twins_in_place():
    """While it lasts, every pytorch_lightning.* and lightning_fabric.* in sys.modules is its twin module."""
    standing_in = {}
    for name in [name for name in sys.modules if name.partition(".")[0] in TWINS]:
        head, dot, rest = name.partition(".")
        try:
            twin = importlib.import_module(TWINS[head] + dot + rest)
        except ImportError:  # a module of one copy only: the other's stays
            continue
        standing_in[name] = sys.modules[name]
        sys.modules[name] = twin
    try:
        yield
    finally:
        sys.modules.update(standing_in)


def under_lightning() -> types.ModuleType:
    """load_best.py imported once more with lightning.pytorch in place of pytorch_lightning (once a process)."""
    if UNDER_LIGHTNING not in sys.modules:
        spec = importlib.util.spec_from_file_location(UNDER_LIGHTNING, load_best.__file__)
        module = importlib.util.module_from_spec(spec)
        sys.modules[UNDER_LIGHTNING] = module  # before it runs: its dataclasses look their module up there
        try:
            with twins_in_place():
                spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[UNDER_LIGHTNING]
            raise
    return sys.modules[UNDER_LIGHTNING]
