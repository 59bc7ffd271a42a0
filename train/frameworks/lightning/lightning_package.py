"""Which Lightning runs: pytorch_lightning, or the `lightning` package's lightning.pytorch (what Lightning's docs
import now). The two are separate copies of the same code: a Trainer takes only plugins, callbacks, a strategy
and a LightningModule of its own copy. So a class of yours (fix=own) whose bases come from the lightning package
(lightning.pytorch, lightning.fabric) runs under lightning.pytorch's Trainer: load_best.py is loaded a second
time, with every pytorch_lightning and lightning_fabric in its source read as lightning.pytorch and
lightning.fabric. One source for both, so nothing is kept in step by hand; everything else runs pytorch_lightning.
"""
import sys
import types
from pathlib import Path

from train.frameworks.lightning import load_best
from train.toolkit.rank import Rank, named_class

BY_FIX = load_best.BY_FIX  # the dispatch (train.frameworks.fix_way reads it here): load_best's, for either copy
RENAMED = {"pytorch_lightning": "lightning.pytorch", "lightning_fabric": "lightning.fabric"}
UNDER_LIGHTNING = "train.frameworks.lightning.load_best_under_lightning"  # the second load's module name


def fit_and_load(rank: Rank):
    """load_best's fit_and_load, under the Lightning that the class of yours is written against."""
    module = under_lightning() if written_for_lightning(rank.cfg) else load_best
    return module.fit_and_load(rank)


def written_for_lightning(cfg: dict) -> bool:
    """Whether fix=own names a class whose bases come from the lightning package."""
    if cfg["fix"]["name"] != "own":
        return False
    return any(c.__module__.partition(".")[0] == "lightning" for c in named_class(cfg["fix"]["_target_"]).__mro__)


def under_lightning() -> types.ModuleType:
    """load_best.py, loaded once more with lightning.pytorch in place of pytorch_lightning (once a process)."""
    if UNDER_LIGHTNING not in sys.modules:
        source = Path(load_best.__file__).read_text(encoding="utf-8")
        for old, new in RENAMED.items():
            source = source.replace(old, new)
        module = types.ModuleType(UNDER_LIGHTNING, load_best.__doc__)
        module.__file__ = load_best.__file__
        sys.modules[UNDER_LIGHTNING] = module  # before it runs: its dataclasses look their module up there
        try:
            exec(compile(source, load_best.__file__, "exec"), module.__dict__)  # noqa: S102  (our own file)
        except BaseException:
            del sys.modules[UNDER_LIGHTNING]
            raise
    return sys.modules[UNDER_LIGHTNING]
