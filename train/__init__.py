"""A lab for checkpoint save/load races in distributed training.

The story, in reading order:
  launch.py    Hydra main: check the config, start the ranks with torch elastic, collect, summarise
  plan.py      config checks and the device/backend choice (before any rank starts)
  worker.py    one rank: data, learner, fit, and the save/load under test
  callbacks.py the SaveModelCallback variants, which differ only in how they sync
  fastai_gloo.py  the one adaptation that lets fastai's DDP run on CPU ranks over gloo
  events.py    each rank's append-only event log
  outcomes.py  pure functions: events -> what each rank saw -> verdict
  summary.py   summary.json, the environment, and the console table
  sweep.py     Hydra callback for -m: job k of n, then the report
  report.py    runs -> report.csv, report.md and plots
  bench.py     wall time and launcher memory, recorded to a file
"""
import warnings

# fastai's import calls torch.jit.script, which torch 2.14 deprecates: once per rank, noise only
warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated")
