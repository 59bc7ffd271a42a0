"""Which framework runs: one adapter module per framework, named by configs/framework/<name>.yaml.

An adapter is a module with a function for each workload it has (the `workload` key):
`fit_and_load(rank: train.toolkit.rank.Rank)` trains the run's small model with that framework's own
documented way to keep the best checkpoint and load it at the end; `fit_and_resume(rank)` saves a checkpoint
every epoch and, at the start of every attempt torch elastic makes (launch.max_restarts), resumes from the
newest with the framework's own resume path. Both call train/faults.py's points at the framework's public
seams and record the events that train/judge/ reads (see train/toolkit/). Importing the
module imports its framework: the forkserver preloads the run's adapter (and only it), the launcher never imports one.

  fastai/        SaveModelCallback(every='improvement'), the seed (its fixes: fastai/callbacks.py)
  lightning/     ModelCheckpoint(save_top_k=1) and validate(ckpt_path="best"); fit(ckpt_path="last")
  transformers/  Trainer with TrainingArguments(load_best_model_at_end=True); resume_from_checkpoint
  accelerate/    Accelerator.save_state of the best, load_state at the end; load_state at every start
  torch_loop/    no framework: a DDP loop that only resumes (workload=resume)
Each package's __init__.py re-exports its workload functions; load_best.py and resume.py hold them, and what both
share sits beside them (seams.py: the framework's write seam; model.py). Which fix applies where is said once,
in configs/framework/<name>.yaml's not_for; each workload module's BY_FIX is how it does each fix it has.
"""
import importlib
import importlib.util


ENTRY = {"load_best": "fit_and_load", "resume": "fit_and_resume"}  # the adapter's function for each workload
CLASS_NAMED = "fix._target_"  # a dispatch that is the config's: each fix is the class fix._target_ names


def entry(cfg: dict):
    """The run's adapter function for its workload (importing the adapter imports its framework)."""
    return getattr(importlib.import_module(cfg["framework"]["adapter"]), ENTRY[cfg["workload"]])


def fix_way(cfg: dict):
    """How the run's adapter does the run's fix for its workload, or None where it has no way to. Each workload
    module keeps its dispatch, BY_FIX: fix.name -> how it does that fix (the implementation, no list beside it);
    where BY_FIX is CLASS_NAMED (fastai: each fix a SaveModelCallback subclass), the way is the class that
    fix._target_ names (fix=own: yours). Which fix applies is said in one place, configs/framework/'s
    not_for (launch/plan.py's not_applicable, before any rank starts); tests/test_fix_support.py holds every
    dispatch to it. Imports the adapter, so its framework: for tests, never the launcher."""
    ways = importlib.import_module(entry(cfg).__module__).BY_FIX
    if ways is CLASS_NAMED:
        return cfg["fix"]["_target_"]
    return ways.get(cfg["fix"]["name"])


def adapter_functions(module: str) -> set:
    """The workload functions (ENTRY's) that `module`'s source defines or re-exports at its top level: none when
    it is no adapter. Read without importing it (nor its framework)."""
    import ast

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError, TypeError):
        return set()
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return set()
    try:
        tree = ast.parse(open(spec.origin, encoding="utf-8").read())
    except (OSError, SyntaxError, ValueError):
        return set()
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    reexported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                  for alias in node.names}  # a framework's package: `from .load_best import fit_and_load`
    return (defined | reexported) & set(ENTRY.values())
