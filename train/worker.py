"""One rank: join the group, build data and learner, fit, and save/load under test.

Runs in a process started by torch elastic, which sets RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT. Every step lands in events/rank<N>.jsonl.
"""
import importlib
import os
import socket
from datetime import timedelta

import fastai.callback.progress  # noqa: F401  (adds Learner.no_bar)
import fastai.callback.schedule  # noqa: F401  (adds Learner.fit_one_cycle)
import torch
import torch.distributed as dist
from fastai.learner import Learner
from fastai.layers import SimpleCNN
from fastai.losses import CrossEntropyLossFlat
from fastai.metrics import accuracy
from fastai.torch_core import set_seed

from train.callbacks import say
from train.data import CHANNELS, make_dls
from train.events import EventLog
from train.fastai_gloo import distrib_ctx
from train.faults import Faults


def epoch_table(learn):
    """fastai's per-epoch table without the progress bar, whose carriage returns garble a log file."""
    def log(values):
        if not getattr(log, "started", False):
            log.started = True
            print("  ".join(f"{name:<10}" for name in learn.recorder.metric_names), flush=True)
        print("  ".join(f"{v:<10.6f}" if isinstance(v, float) else f"{v!s:<10}" for v in values), flush=True)
    return log


def checkpoint_dir(cfg: dict) -> str:
    """Where this rank's node keeps checkpoints: one folder for all, or each node its own (its own disk).
    A node is the rendezvous' (GROUP_RANK: the node that holds global rank 0 is node 0), which c10d
    assigns without regard to the launcher's node_rank."""
    folder = cfg["checkpoint"]["dir"]
    return f"{folder}/node{os.environ.get('GROUP_RANK', 0)}" if cfg["checkpoint"]["node_local"] else folder


def run_rank(cfg: dict, plan: dict, run_dir: str) -> dict:
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    events = EventLog(run_dir, rank)
    events.record("rank_start", pid=os.getpid(), host=socket.gethostname(), node=int(os.environ.get("GROUP_RANK", 0)),
                  launcher_node_rank=cfg["node_rank"],
                  device=plan["device"], backend=plan["backend"])

    if plan["device"] == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # ranks share the cores
        torch.set_num_threads(1)
        device = torch.device("cpu")
    dist.init_process_group(plan["backend"], timeout=timedelta(seconds=cfg["timeout"]["collective_s"]),
                            device_id=device if device.type == "cuda" else None)
    set_seed(cfg["seed"])

    learn = Learner(make_dls(cfg["data"], cfg["seed"], device),
                    SimpleCNN((CHANNELS[cfg["data"]["name"]], 16, 16, 2)),  # the seed's simple_cnn((3,16,16,2))
                    loss_func=CrossEntropyLossFlat(), metrics=accuracy,
                    path=run_dir, model_dir=checkpoint_dir(cfg))
    module, _, fix = cfg["callback"]["_target_"].rpartition(".")
    save_model_cb = getattr(importlib.import_module(module), fix)(
        events, Faults(cfg, events, say), cfg["checkpoint"], timeout_s=cfg["timeout"]["collective_s"])

    learn.logger = epoch_table(learn)
    with distrib_ctx(learn, plan["device"], plan["backend"]), learn.no_bar():
        learn.fit_one_cycle(cfg["epochs"], cfg["lr"], cbs=save_model_cb)

    wait_for_every_rank(cfg["world_size"], cfg["timeout"]["collective_s"] + 10)
    events.record("rank_end")
    dist.destroy_process_group()
    return {"rank": rank, "pid": os.getpid()}


def wait_for_every_rank(world_size: int, timeout_s: float):
    """No rank leaves before every rank is done with the checkpoint: a rank that went its own way
    (scenario=disagree) would otherwise close its connections and turn a peer's hang into an error.
    Counted on the rendezvous store, not with a collective, which could pair with a peer's barrier:
    the last rank to count in sets a key that the others wait for."""
    store = dist.distributed_c10d._get_default_store()
    try:
        if store.add("race-lab/done", 1) == world_size:
            store.set("race-lab/all-done", "1")
        store.wait(["race-lab/all-done"], timedelta(seconds=timeout_s))
    except (RuntimeError, dist.DistError):  # a timeout, or the store went with a node that was stopped
        pass
