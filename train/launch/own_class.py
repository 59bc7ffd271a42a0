"""fix=own: a checkpoint class of your own (fix._target_=package.module.Class), checked before
any rank starts. It must import, subclass one of the bases its framework's contract names (own_bases), or, where
the contract names no base (a plain loop), have the methods it names, each taking what the adapter passes; and be
buildable with the arguments it will get: fix.kwargs, and what race-lab's adapter gives that base.

The check runs in a short-lived Python process (own_class_probe.py): importing the class imports its framework,
which the launcher never does. It imports as a rank does (train/rank/entry.py): race-lab's own `train` first, then
the folder the command ran from, then PYTHONPATH. A base that gets fix.kwargs alone (a CheckpointIO, a
TrainerCallback) is built there for real, so a constructor that raises is caught too; the others are built
from race-lab's own objects in the ranks, so here their arguments are bound to the constructor's signature.
Bad: one line, as a ConfigError (exit 2). See examples/ and docs/own-code.md."""
import json
import subprocess
import sys

from train.config import ConfigError
from train.frameworks.base import FOLDER, STAND_IN, FromConfig, OwnBase
from train.launch.plan import the_framework


def check_own_class(cfg: dict, timeout_s: float = 600):
    """Raise ConfigError unless fix._target_ names a subclass of one of the framework's own_bases that can be
    built with fix.kwargs."""
    target, kwargs = cfg["fix"]["_target_"], cfg["fix"]["kwargs"]
    if not target:
        raise ConfigError("fix=own: give the class to test, fix._target_=package.module.Class "
                          "(importable: in the folder you run from, installed, or on PYTHONPATH)")
    bases = {base.kind(): as_sent(base, cfg) for base in the_framework(cfg).own_bases}
    function = [] if cfg["fix"]["ckpt_path"] == "last" else [cfg["fix"]["ckpt_path"]]  # a function of yours
    try:
        done = subprocess.run([sys.executable, "-P", "-m", "train.launch.own_class_probe", target, json.dumps(kwargs),
                               json.dumps(bases), *function],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"fix._target_={target!r}: importing and building it took over {timeout_s:g} s") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        if why.startswith("fix.ckpt_path="):
            raise ConfigError(why)
        if any(cfg["workload"] in base.keywords_in for base in the_framework(cfg).own_bases):  # say which build
            why = why.replace("cannot be built", f"cannot be built as workload={cfg['workload']} builds it", 1)
        raise ConfigError(f"fix._target_={target!r}: {why}")


def as_sent(base: OwnBase, cfg: dict) -> list:
    """What the probe is told of a base: [its positional names, its keyword names, how to build it: each given
    argument's {"value": ...}, {"folder": true} or {"stand_in": true}, or None where one has none: bound only;
    its dotted path (None: no base), the methods a class of it must have: {name: the arguments passed}]."""
    keywords, built_with = base.given_in(cfg["workload"])
    given = [*base.positional, *keywords]
    built = None
    if all(name in built_with for name in given):
        built = {name: sent(built_with[name], cfg) for name in given}
    return [list(base.positional), list(keywords), built, base.path, {k: list(v) for k, v in base.methods.items()}]


def sent(how, cfg: dict) -> dict:
    if isinstance(how, FromConfig):
        value = cfg
        for part in how.key.split("."):
            value = value[part]
        return {"value": value}
    if how == FOLDER:
        return {"folder": True}
    if how == STAND_IN:
        return {"stand_in": True}
    return {"value": how}


def check_kwargs(cfg: dict):
    """fix.kwargs are for a class of yours: with any other fix, refused (its class takes none)."""
    if cfg["fix"]["kwargs"] and cfg["fix"]["name"] != "own":
        raise ConfigError(f"fix.kwargs={cfg['fix']['kwargs']!r}: only for fix=own (your class's constructor); "
                          f"fix={cfg['fix']['name']} takes none")
