"""Which framework runs: one adapter module per framework, named by configs/framework/<name>.yaml.

An adapter is a module with one function, `fit_and_load(rank: train.frameworks.common.Rank)`: train
the run's small model with that framework's own documented way to keep the best checkpoint and load
it at the end, call train/faults.py's points at the framework's public seams, and record the events
that train/outcomes.py reads (see train/frameworks/common.py). Importing the module imports its
framework: the forkserver preloads the run's adapter (and only it), the launcher never imports one.

  fastai.py        SaveModelCallback(every='improvement'), the seed (fixes: train/callbacks.py)
  lightning.py     ModelCheckpoint(save_top_k=1) and validate(ckpt_path="best")
  transformers.py  Trainer with TrainingArguments(load_best_model_at_end=True)
  accelerate.py    Accelerator.save_state of the best, load_state at the end
"""
import importlib
import importlib.util


def adapter(cfg: dict):
    """The run's adapter module (imports its framework)."""
    return importlib.import_module(cfg["framework"]["adapter"])


def is_adapter(module: str) -> bool:
    """Whether `module` is an adapter: a module whose source defines fit_and_load at its top level. Read
    without importing it (nor its framework)."""
    import ast

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError, TypeError):
        return False
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    try:
        tree = ast.parse(open(spec.origin, encoding="utf-8").read())
    except (OSError, SyntaxError, ValueError):
        return False
    return any(isinstance(node, ast.FunctionDef) and node.name == "fit_and_load" for node in tree.body)
