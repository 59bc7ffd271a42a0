"""race-lab's contract for the in-house trainer (train/frameworks/base.py): imports nothing of the trainer or of
torch, so that race-lab's launcher can read it. Registered in pyproject.toml under `race_lab.frameworks`."""

from train.frameworks.base import Framework


class InHouse(Framework):
    name = "inhouse"
    distribution = "inhouse-trainer"
    workloads = {"load_best": "inhouse_trainer.adapter:fit_and_load"}
    as_shipped_fix = "as_shipped"  # the trainer as written: no barrier before the load
    fixes = {"load_best": frozenset({"as_shipped", "barrier"})}  # barrier: InHouseTrainer(barrier=...)
    config = {"fault": {"best_epoch": -1}}  # it saves on improvement only: every epoch improves, the last one too
    lacks = {"resume": "the in-house trainer keeps the best and loads it at the end; it has no resume"}
