"""A lab for checkpoint save/load races in distributed training.

The story, in reading order (.importlinter holds the layers: each part imports only the parts below it):
  __main__.py    the race-lab command: start the forkserver early, then Hydra's job
  config.py      the schema: every key, its type, default, range and meaning, declared once
  launch/        launching: the Hydra job (job.py), the checks before any rank starts (preflight.py, plan.py,
                 own_class.py), one run (experiment.py) driving torch elastic (elastic.py), nodes (nodes.py),
                 a sweep (sweep.py) and its jobs' progress (progress.py), a folder of its own (folders.py), its n/a
                 jobs left out before any starts (cells.py, with the sweeper in plugins/hydra_plugins/), a
                 sweep's jobs on a Ray cluster (ray_jobs.py, with its launcher there), the forkserver
                 (forkserver.py), Hydra's errors in one line
  rank/          one rank: its entry point (entry.py), the worker that joins the group and hands over to the
                 framework's adapter (worker.py), what any code of the rank does to checkpoint files, seen through
                 Python's audit hooks (observe.py), what the forkserver imports once (preload.py)
  frameworks/    the framework axis: one package per framework (fastai, lightning, transformers, accelerate,
                 torch_loop, deepspeed, ray_train), each with its load-best and resume adapters, faults at its public seams
  fixes.py       the fix axis: each fix written once as a strategy (atomic write, broadcast, agree, dcp ...)
  faults.py      the scenario axis: what goes wrong, placed on purpose at named points (configs/scenario/)
  toolkit/       what adapters and fixes are handed: the rank's context (rank.py), errors as event fields
                 (errors.py), the small model (model.py) and its data (data.py), the hang detector (hang.py)
  events.py      each rank's append-only event log
  judge/         judging, pure functions over event records: the vocabulary, the load-best verdict and its
                 sentence, your own code's reads (own_reads.py), the resume verdict, and which applies (verdict.py)
  report/        reporting: runs -> report.csv/md and figures, the matrix (csv, md, png, html), rates with
                 their intervals, the console table, several nodes' records merged, runs pruned to their records
                 (prune.py, race-lab prune); python -m train.report
  bench/         make bench: time to verdict, each figure beside its goal
  torch_private.py  every use of a private torch function, each saying what is lost if it goes
  process.py     a process that ends with its parent
  callbacks.py   the old import path of fastai's fixes (train.frameworks.fastai.callbacks), kept for users
"""
import warnings

# fastai's import calls torch.jit.script, which torch 2.14 deprecates: once per rank, noise only
warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated")
