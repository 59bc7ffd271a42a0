"""fix=own: a checkpoint class of your own (fix._target_=package.module.Class), checked before
any rank starts. It must import, subclass one of the framework's kinds (framework.own_class_kinds), and be
buildable with the arguments it will get: fix.kwargs, and what race-lab's adapter gives that kind (GIVEN).

The check runs in a short-lived Python process: importing the class imports its framework, which the
launcher never does. It imports as a rank does (train/rank/entry.py): race-lab's own `train` first, then the
folder the command ran from, then PYTHONPATH. A kind that gets fix.kwargs alone (a CheckpointIO, a
TrainerCallback) is built there for real, so a constructor that raises is caught too; the others are built
from race-lab's own objects in the ranks, so here their arguments are bound to the constructor's signature.
Bad: one line, as a ConfigError (exit 2). See examples/ and docs/own-code.md."""
import json
import subprocess
import sys

from train.config import ConfigError

LIGHTNING_CHECKPOINT = ["dirpath", "filename", "monitor", "mode", "save_top_k"]
# what an adapter gives each kind's constructor besides fix.kwargs: (positional, keyword) argument names
GIVEN = {
    "train.frameworks.fastai.callbacks.RaceSaveModelCallback": (["events", "faults", "checkpoint"], ["timeout_s"]),
    "pytorch_lightning.callbacks.ModelCheckpoint": ([], LIGHTNING_CHECKPOINT),
    "lightning.pytorch.callbacks.ModelCheckpoint": ([], LIGHTNING_CHECKPOINT),
    "transformers.Trainer": ([], ["model", "args", "train_dataset", "eval_dataset", "compute_metrics"]),
}

CHECK = """
import importlib, inspect, json, sys
here = sys.path.pop(0) if sys.path[:1] == [""] else None
import train  # race-lab's own, loaded before the folder run from is looked in, as in a rank
if here is not None:
    sys.path.insert(0, here)
target, kwargs, kinds = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
module, _, name = target.rpartition(".")
if not module:
    sys.exit(f"is not a dotted path package.module.Class")
try:
    found = getattr(importlib.import_module(module), name)
except AttributeError:
    try:
        importlib.import_module(target)
    except Exception:
        sys.exit(f"does not import (no {name} in {module})")
    sys.exit("is a module, not a class")
except Exception as e:
    sys.exit(f"does not import ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})")
if not isinstance(found, type):
    sys.exit(f"is {type(found).__name__}, not a subclass of " + " or ".join(kinds))
loaded = lambda kind: kind.partition(".")[0] in sys.modules  # its framework, imported by the class already
kind = next((kind for kind in sorted(kinds, key=loaded, reverse=True)
             if issubclass(found, getattr(importlib.import_module(kind.rpartition(".")[0]), kind.rpartition(".")[2]))),
            None)
if kind is None:
    sys.exit("is a class of another kind, not a subclass of " + " or ".join(kinds))
positional, keywords = kinds[kind]
try:
    inspect.signature(found).bind(*positional, **dict.fromkeys(keywords), **kwargs)
except TypeError as e:
    missing = str(e).partition("missing a required argument: ")[2].strip("'")
    sys.exit(f"cannot be built: {e}" + (f" (give it with +fix.kwargs.{missing}=VALUE)" if missing.isidentifier() else ""))
except ValueError:
    pass  # no signature to read (a builtin's): the build below, or the ranks, will tell
if not positional and not keywords:
    try:
        found(**kwargs)
    except Exception as e:
        sys.exit(f"cannot be built ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})")
"""


def check_own_class(cfg: dict, timeout_s: float = 600):
    """Raise ConfigError unless fix._target_ names a class of one of the framework's kinds that can be built
    with fix.kwargs."""
    target, kinds, kwargs = cfg["fix"]["_target_"], cfg["framework"]["own_class_kinds"], cfg["fix"]["kwargs"]
    if not target:
        raise ConfigError("fix=own: give the class to test, fix._target_=package.module.Class "
                          "(importable: in the folder you run from, installed, or on PYTHONPATH)")
    given = {kind: GIVEN.get(kind, ([], [])) for kind in kinds}
    try:
        done = subprocess.run([sys.executable, "-c", CHECK, target, json.dumps(kwargs), json.dumps(given)],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"fix._target_={target!r}: importing and building it took over {timeout_s:g} s") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise ConfigError(f"fix._target_={target!r}: {why}")


def check_kwargs(cfg: dict):
    """fix.kwargs are for a class of yours: with any other fix, refused (its class takes none)."""
    if cfg["fix"]["kwargs"] and cfg["fix"]["name"] != "own":
        raise ConfigError(f"fix.kwargs={cfg['fix']['kwargs']!r}: only for fix=own (your class's constructor); "
                          f"fix={cfg['fix']['name']} takes none")
