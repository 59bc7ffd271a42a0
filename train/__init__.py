"""A lab for checkpoint save/load races in distributed training.

The story, in reading order:
  config.py    the schema: every key, its type, default, range and meaning, declared once
  early.py     the forkserver's life: started before the launcher imports torch, ended at exit
  launch.py    Hydra main: check the config, start the ranks with torch elastic, collect, summarise
  torch_private.py  every use of a private torch function, each saying what is lost if it goes
  errors.py    Hydra's composition errors as one line
  plan.py      rules across keys, the machine's limits, the device/backend choice (before any rank starts)
  own_class.py callback=own: a checkpoint class of your own, checked before any rank starts
  nodes.py     several nodes: a node's own record, the merge, one host standing in for several
  rank.py      each rank's entry point, small, so a forked rank need not import the launcher
  worker.py    one rank: join the group, hand over to the run's framework adapter, wait for every rank
  preload.py   what the forkserver imports once, before it forks any rank
  frameworks/  which framework runs: one adapter per framework (fastai, lightning, transformers, accelerate),
               each training with that framework's own save-best / load-at-the-end code, faults at its seams
  fixes.py     how ranks sync: each fix written once as a strategy (atomic write, broadcast, agree, dcp ...)
  callbacks.py fastai's fixes: SaveModelCallback variants that differ only in how they save, sync and load
  faults.py    what goes wrong, placed on purpose at named points (configs/scenario/ picks them)
  hang.py      where each rank waits, on the rendezvous store: a hang named the moment it is certain
  fastai_gloo.py  the one adaptation that lets fastai's DDP run on CPU ranks over gloo
  events.py    each rank's append-only event log
  outcomes.py  pure functions: events -> what each rank saw -> verdict
  summary.py   summary.json, the environment, and the console table
  sweep.py     Hydra callback for -m: job k of n, then the report
  rates.py     a rate as a count with its 95% Wilson interval; which runs a rate does not count
  report.py    runs -> report.csv, report.md and plots; --merge for several nodes' run dirs
  matrix.py    a sweep's scenario x fix matrix: matrix.csv, matrix.md, matrix.png
  matrix_html.py  matrix.html: the matrix as one static page; a click on a cell lists its runs
  figures.py   what the pictures share: text wrapped to the figure, a legend that fits
  stability.py the seed scenario N times per fix: how stable the verdicts are
  bench.py     wall time and launcher memory, recorded to a file
"""
import warnings

# fastai's import calls torch.jit.script, which torch 2.14 deprecates: once per rank, noise only
warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated")
