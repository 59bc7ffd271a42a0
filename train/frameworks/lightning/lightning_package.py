"""Which Lightning runs: pytorch_lightning, or the `lightning` package's lightning.pytorch (what Lightning's docs
import now). The two are separate copies of the same code: a Trainer takes only plugins, callbacks, a strategy
and a LightningModule of its own copy. So a class of yours (fix=own) whose bases come from the lightning package
(lightning.pytorch, lightning.fabric) runs under lightning.pytorch's Trainer: the workload's module (load_best.py,
resume.py, with the adapter modules it imports that bind Lightning) is imported a second time, under another module
name, while each pytorch_lightning and lightning_fabric module in sys.modules stands for its lightning.pytorch or
lightning.fabric twin, so its `import pytorch_lightning ...` lines bind the twins. Its source is neither read nor
changed: Python's import system does the binding (sys.modules is its public cache). Everything else runs
pytorch_lightning.
"""

import importlib
import importlib.util
import sys
import types
from contextlib import contextmanager

from train.frameworks.lightning import async_save, load_best, rank0_leads, resume
from train.toolkit.rank import Rank, named_class

# each workload's module, whose dispatch (BY_FIX) holds for either copy (test_fix_support.py reads it there)
WORKLOAD_MODULES = {"load_best": load_best, "resume": resume}
TWINS = {"pytorch_lightning": "lightning.pytorch", "lightning_fabric": "lightning.fabric"}
SECOND = "_under_lightning"  # the second import's module names: the first's, with this after it
# each workload's module, after the adapter modules it imports that bind Lightning (imported again first)
UNDER_LIGHTNING = {"load_best": [load_best], "resume": [rank0_leads, async_save, resume]}


def fit_and_load(rank: Rank):
    """load_best's fit_and_load, under the Lightning that the class of yours is written against."""
    module = under_lightning("load_best") if written_for_lightning(rank.cfg) else load_best
    return module.fit_and_load(rank)


def fit_and_resume(rank: Rank):
    """resume's fit_and_resume, under the Lightning that the class of yours is written against."""
    module = under_lightning("resume") if written_for_lightning(rank.cfg) else resume
    return module.fit_and_resume(rank)


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


def under_lightning(workload: str) -> types.ModuleType:
    """The workload's module imported once more with lightning.pytorch in place of pytorch_lightning (once a
    process); each adapter module it imports, imported again before it, stands for the first while it runs."""
    again = {}
    with twins_in_place():
        for module in UNDER_LIGHTNING[workload]:
            again[module.__name__] = imported_again(module, again)
    return again[UNDER_LIGHTNING[workload][-1].__name__]


def imported_again(module: types.ModuleType, again: dict) -> types.ModuleType:
    """`module` imported a second time (named with SECOND after its name), while the modules in `again` (first
    name -> second) stand for their firsts in sys.modules."""
    name = module.__name__ + SECOND
    if name in sys.modules:
        return sys.modules[name]
    standing_in = {first: sys.modules[first] for first in again}
    spec = importlib.util.spec_from_file_location(name, module.__file__)
    second = importlib.util.module_from_spec(spec)
    sys.modules[name] = second  # before it runs: its dataclasses look their module up there
    sys.modules.update(again)
    try:
        spec.loader.exec_module(second)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.modules.update(standing_in)
    return second
