"""The rank's toolkit: what every adapter and fix is handed (Rank), the console line, where checkpoints live."""
import importlib
import os
from dataclasses import dataclass
from datetime import datetime

import torch
import torch.distributed as dist


@dataclass
class Rank:
    """One rank's view of the run, handed to its framework's adapter."""
    cfg: dict  # the whole config (train/config.py)
    plan: dict  # device, backend (train/launch/plan.py)
    run_dir: str  # the run dir (events/, logs/); checkpoints go to checkpoint_dir(cfg)
    events: object  # this rank's EventLog
    faults: object  # train/faults.py's points for this run
    device: torch.device


def named_class(dotted: str):
    """The class a dotted path names (fix._target_: fastai's fixes, or a class of your own, which the
    launcher has checked: train/launch/own_class.py)."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def say(text):
    """A console line with the time and the real rank, like the seed's log."""
    print(f"{datetime.now():%H:%M:%S.%f}"[:-3] + f" rank {dist.get_rank()}: {text}", flush=True)


def local_rank() -> int:
    return int(os.environ["LOCAL_RANK"])


def node_disk(cfg: dict) -> str:
    """shared | folder | mount: where this rank's node keeps checkpoints (see checkpoint_dir)."""
    if not cfg["checkpoint"]["node_local"]:
        return "shared"
    return "mount" if os.environ.get("RACE_LAB_NODE_DISK") == "mount" else "folder"


def checkpoint_dir(cfg: dict) -> str:
    """Where this rank's node keeps checkpoints. One folder for all; with checkpoint.node_local each node
    its own disk: a private tmpfs on the same path (each node's agent in its own mount namespace,
    train/launch/nodes.py), or where that is not possible, a folder of its own, <dir>/node<K>. A node is the
    rendezvous' (GROUP_RANK: the node that holds global rank 0 is node 0)."""
    folder = cfg["checkpoint"]["dir"]
    if node_disk(cfg) == "folder":
        return f"{folder}/node{os.environ.get('GROUP_RANK', 0)}"
    return folder


def last_epoch(cfg: dict) -> int:
    return cfg["epochs"] - 1
