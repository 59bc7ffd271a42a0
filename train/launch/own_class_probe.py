"""The class check's other process (own_class.py runs it with `python -P -m`): import the class of yours that
fix._target_ names, find which of the framework's bases it subclasses, and bind (or, for a base that gets
fix.kwargs alone, build) it with the arguments it will get. Exits with one line on stderr when it cannot.

    python -P -m train.launch.own_class_probe TARGET KWARGS_JSON BASES_JSON [FUNCTION]

BASES_JSON: {a base's name: [positional names, keyword names, how to build it or null, its dotted path or null (no
base: any class with the methods), {method: the arguments passed}]} (own_class.as_sent). It
imports as a rank does (train/rank/entry.py): race-lab's own `train` first (-P keeps the folder run from off
sys.path until then), then that folder. FUNCTION: a function of yours the adapter calls with the checkpoint folder
(fix.ckpt_path), checked too."""

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


def lacking(found: type, methods: dict) -> str:
    """'' when `found` has every method named, each taking the arguments listed; else the first that does not."""
    for name, args in methods.items():
        method = getattr(found, name, None)
        if not callable(method):
            return f"has no method {name}({', '.join(args)}), which race-lab calls"
        try:
            inspect.signature(method).bind(None, *args)  # the instance, then what the loop passes
        except TypeError as e:
            return f"its {name} cannot be called as {name}({', '.join(args)}): {e}"
        except ValueError:
            pass  # no signature to read: the ranks will tell
    return ""


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
    subclassed = [kind for kind in bases if not bases[kind][4]]
    shaped = [kind for kind in bases if bases[kind][4]]  # any class with these methods
    kinds = " or ".join((["a subclass of " + " or ".join(subclassed)] if subclassed else []) + shaped)
    if not isinstance(found, type):
        return f"is {type(found).__name__}, not {kinds}"

    def loaded(kind):  # its framework is imported by the class already: try that base first
        return bool(bases[kind][3]) and bases[kind][3].partition(".")[0] in sys.modules

    def fits(kind):
        path, methods = bases[kind][3:]
        return not lacking(found, methods) if methods else issubclass(found, resolve(path))

    base = next((kind for kind in sorted(bases, key=loaded, reverse=True) if fits(kind)), None)
    if base is None:
        if len(bases) == 1 and shaped:  # no base to subclass: say which method it lacks, or which does not fit
            return lacking(found, bases[shaped[0]][4])
        return f"is a class of another kind, not {kinds}"
    positional, keywords, built = bases[base][:3]
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


def probe_function(dotted: str) -> str:
    """'' when `dotted` names a function that can be called with one argument (the checkpoint folder), else why not."""
    module, _, name = dotted.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name) if module else None
    except Exception as e:
        return f"does not import ({first_line(e)})"
    if not callable(found):
        return "is not a dotted path package.module.function of yours"
    try:
        inspect.signature(found).bind("folder")
    except TypeError as e:
        return f"cannot be called as {name}(folder): {e}"
    except ValueError:
        pass  # no signature to read: the ranks will tell
    return ""


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())  # the folder run from, after race-lab's own train (imported above)
    why = probe(sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]))
    if not why and len(sys.argv) > 4 and (why_not := probe_function(sys.argv[4])):
        why = f"fix.ckpt_path={sys.argv[4]!r}: {why_not}"
    sys.exit(why or None)
