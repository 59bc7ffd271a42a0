"""What every framework adapter shares: the rank's context, the small model and the data as plain
torch, a digest of weights, and error fields for events. Torch only: no framework is imported here.

The events an adapter records (train/outcomes.py reads them; `path` and `digest` fields as shown):
  fit_start{train_batches, node_local}
  save_start{epoch, path}   save_end{epoch, path, digest, bytes}   save_error{epoch, error_type, message}
  train_end                 (fit is over; what follows is the load at the end)
  sync_enter{how} sync_exit{how} sync_error{how, error_type, message, timed_out}   around any wait
  hang{sync, n, waiting_for, peers, certain_at}   recorded by train/fixes.py's watched itself (train/hang.py)
  skip{reason}              it decided not to load, and why
  load_attempt{path, bytes} the file it opens (bytes: its size then, null when there is none)
  load_done{path, digest}   the digest of the weights it READ (not of its model after a later sync)
  load_error{error_type, message}
  final{digest}             the weights it ends the run with
A save's digest and a read's digest are both weights_digest over the same state dict (name -> tensor).
"""
import hashlib
import importlib
import os
import traceback
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import torch
import torch.distributed as dist
from torch import nn


@dataclass
class Rank:
    """One rank's view of the run, handed to its framework's adapter."""
    cfg: dict  # the whole config (train/config.py)
    plan: dict  # device, backend (train/plan.py)
    run_dir: str  # the run dir (events/, logs/); checkpoints go to checkpoint_dir(cfg)
    events: object  # this rank's EventLog
    faults: object  # train/faults.py's points for this run
    device: torch.device


def named_class(dotted: str):
    """The class a dotted path names (callback._target_: fastai's fixes, or a class of your own, which the
    launcher has checked: train/own_class.py)."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def weights_digest(state) -> str:
    """A short hash of a state dict's weights (name -> tensor), to tell which checkpoint a rank holds."""
    h = hashlib.sha256()
    for name, tensor in state.items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


READERS = ("torch/serialization.py", "torch/_weights_only_unpickler.py", "/zipfile.py", "/pickle.py",
           "safetensors/torch.py")  # where an exception means the file's bytes could not be read


def error_fields(e: BaseException) -> dict:
    """An exception as event fields; in_reader: it was raised while a checkpoint's bytes were decoded
    (torch.load of garbage raises IndexError, KeyError, ... from its unpickler). dcp's CheckpointException
    stands for the first rank's own exception, which is what is recorded."""
    failures = getattr(e, "failures", None)  # rank -> (exception, its stack)
    first = next(iter(failures.values()), None) if isinstance(failures, dict) else None
    if isinstance(first, tuple) and first and isinstance(first[0], BaseException):
        e = first[0]
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    message = lines[0][:300] if lines else ""
    if message.startswith("Weights only load failed"):  # torch's reason comes lines later: a global, or garbage
        reason = next((line for line in lines[1:] if not line.startswith(("Please file", "Check the documentation"))),
                      "")
        message = f"Weights only load failed: {reason}"[:300]
    error_type = getattr(e, "error_type", type(e).__name__)
    timed_out = "timed out" in str(e).lower() or "timeout" in error_type.lower()
    frames = traceback.extract_tb(e.__traceback__)
    in_reader = bool(frames) and frames[-1].filename.endswith(READERS)
    return {"error_type": error_type, "message": message, "timed_out": timed_out, "in_reader": in_reader}


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
    train/nodes.py), or where that is not possible, a folder of its own, <dir>/node<K>. A node is the
    rendezvous' (GROUP_RANK: the node that holds global rank 0 is node 0)."""
    folder = cfg["checkpoint"]["dir"]
    if node_disk(cfg) == "folder":
        return f"{folder}/node{os.environ.get('GROUP_RANK', 0)}"
    return folder


# --- the same small model and data for every framework ------------------------------------------------

def conv_layer(n_in: int, n_out: int) -> nn.Sequential:
    """fastai's ConvLayer(n_in, n_out, ks=3, stride=2): conv without bias, batch norm, ReLU."""
    return nn.Sequential(nn.Conv2d(n_in, n_out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(n_out),
                         nn.ReLU())


def small_cnn(channels: int) -> nn.Sequential:
    """The seed's simple_cnn((channels, 16, 16, 2)) in plain torch: what fastai's SimpleCNN builds."""
    return nn.Sequential(conv_layer(channels, 16), conv_layer(16, 16),
                         nn.Sequential(nn.Conv2d(16, 2, 3, stride=2, padding=1), nn.ReLU()),  # no norm on the last
                         nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()))


def digits_split(data: dict, seed: int):
    """scikit-learn's bundled 8x8 digits, two classes, as 1x8x8 images in [0, 1]: (x_train, y_train,
    x_valid, y_valid), the same split on every rank and for every framework."""
    from train.data import preload_digits

    x, y = preload_digits()
    classes = list(data["classes"])
    keep = np.isin(y, classes)
    x = torch.tensor(x[keep] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor([classes.index(v) for v in y[keep]])
    order = np.random.RandomState(seed).permutation(len(y))
    n_valid = int(len(y) * data["valid_pct"])
    valid, train = order[:n_valid], order[n_valid:]
    return x[train], y[train], x[valid], y[valid]


def last_epoch(cfg: dict) -> int:
    return cfg["epochs"] - 1
