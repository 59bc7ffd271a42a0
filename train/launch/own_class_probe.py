"""The class check's other process (own_class.py runs it with `python -P -m`): import the class of yours that
fix._target_ names, find which of the framework's bases it subclasses (or whose interface's methods it has), and bind (or, for a base that gets
fix.kwargs alone, build) it with the arguments it will get. Exits with one line on stderr when it cannot.

    python -P -m train.launch.own_class_probe TARGET KWARGS_JSON BASES_JSON

BASES_JSON: {dotted base: [positional names, keyword names, how to build it or null, interface methods]}
(own_class.as_sent). It
imports as a rank does (train/rank/entry.py): race-lab's own `train` first (-P keeps the folder run from off
sys.path until then), then that folder."""

import importlib
import inspect
import json
import os
import sys
import tempfile


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


class StandIn:
    """What the adapter hands a class of yours from its rank (its event log, its faults): any attribute, any call."""

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self


def made(how: dict, folder: str):
    if how.get("folder"):
        return folder
    if how.get("stand_in"):
        return StandIn()
    return how["value"]


def resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def lacking(found: type, interface: list) -> list:
    """The methods of `interface` that the class has not."""
    return [name for name in interface if not callable(getattr(found, name, None))]


def kinds(bases: dict, found=None) -> str:
    """What the class may be: a subclass of a base, or a class with an interface's methods (and what it lacks)."""
    said = []
    subclassed = [base for base, (_, _, _, interface) in bases.items() if not interface]
    if subclassed:
        said.append("a subclass of " + " or ".join(subclassed))
    for base, (_, _, _, interface) in bases.items():
        if interface:
            lacks = lacking(found, interface) if found is not None else []
            missing = f" (it lacks {', '.join(lacks)})" if 0 < len(lacks) < len(interface) else ""
            said.append(f"a class with {base.rpartition('.')[2]}'s methods {', '.join(interface)}{missing}")
    return " or ".join(said)


def probe(target: str, kwargs: dict, bases: dict) -> str:
    """'' when the class will do, else why not (one line)."""
    module, _, name = target.rpartition(".")
    if not module:
        return "is not a dotted path package.module.Class"
    try:
        found = getattr(importlib.import_module(module), name)
    except AttributeError:
        try:
            importlib.import_module(target)
        except Exception:
            return f"does not import (no {name} in {module})"
        return "is a module, not a class"
    except Exception as e:
        return f"does not import ({first_line(e)})"
    if not isinstance(found, type):
        return f"is {type(found).__name__}, not " + kinds(bases)

    def loaded(base):  # its framework is imported by the class already: try that base first
        return base.partition(".")[0] in sys.modules

    def fits(base):
        interface = bases[base][3]
        if interface:
            return not lacking(found, interface)
        return issubclass(found, resolve(base))

    base = next((base for base in sorted(bases, key=loaded, reverse=True) if fits(base)), None)
    if base is None:
        return "is a class of another kind, not " + kinds(bases, found)
    positional, keywords, built, _ = bases[base]
    try:
        inspect.signature(found).bind(*positional, **dict.fromkeys(keywords), **kwargs)
    except TypeError as e:
        missing = str(e).partition("missing a required argument: ")[2].strip("'")
        return f"cannot be built: {e}" + (
            f" (give it with +fix.kwargs.{missing}=VALUE)" if missing.isidentifier() else ""
        )
    except ValueError:
        pass  # no signature to read (a builtin's): the build below, or the ranks, will tell
    if built is None:  # what the adapter gives it cannot be made here: bound only, above
        return ""
    with tempfile.TemporaryDirectory(prefix="race-lab-own-class-") as folder:
        given = {name: made(how, folder) for name, how in built.items()}
        try:
            found(*(given[name] for name in positional), **{name: given[name] for name in keywords}, **kwargs)
        except Exception as e:
            return f"cannot be built ({first_line(e)})"
    return ""


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())  # the folder run from, after race-lab's own train (imported above)
    why = probe(sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]))
    sys.exit(why or None)
