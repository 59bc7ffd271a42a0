"""fix=own: a checkpoint class of your own (fix._target_=package.module.Class), checked before
any rank starts. It must import and subclass one of the framework's kinds (framework.own_class_kinds).

The check runs in a short-lived Python process: importing the class imports its framework, which the
launcher never does. Bad: one line, as a ConfigError (exit 2). See examples/ and README."""
import subprocess
import sys

from train.config import ConfigError

CHECK = """
import importlib, sys
target, kinds = sys.argv[1], sys.argv[2:]
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
bases = []
for kind in kinds:
    kind_module, _, kind_name = kind.rpartition(".")
    bases.append(getattr(importlib.import_module(kind_module), kind_name))
if not isinstance(found, type) or not issubclass(found, tuple(bases)):
    what = type(found).__name__ if not isinstance(found, type) else "a class of another kind"
    sys.exit(f"is {what}, not a subclass of " + " or ".join(kinds))
"""


def check_own_class(cfg: dict, timeout_s: float = 120):
    """Raise ConfigError unless fix._target_ names a class of one of the framework's kinds."""
    target, kinds = cfg["fix"]["_target_"], cfg["framework"]["own_class_kinds"]
    if not target:
        raise ConfigError("fix=own: give the class to test, fix._target_=package.module.Class "
                          "(importable: installed, or on PYTHONPATH)")
    done = subprocess.run([sys.executable, "-c", CHECK, target, *kinds], capture_output=True, text=True,
                          timeout=timeout_s)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise ConfigError(f"fix._target_={target!r}: {why}")
