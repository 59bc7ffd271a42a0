"""The benchmark's baseline: the seed scenario as a plain script, with no harness around it.

  torchrun --standalone --nproc_per_node=3 bench/plain_torchrun.py [--skew 3] [--epochs 3]

What a user would write with fastai alone: each rank builds the digits (3 vs 7) split, a SimpleCNN
Learner, trains with fit_one_cycle in `distrib_ctx`, rank 0 saves after every epoch and sleeps --skew
seconds before the last save, and every rank then loads the best file without waiting (unsynced, the
seed's race). No Hydra, no events, no summary. It carries only the three adaptations fastai needs to
run DDP on CPU ranks over gloo (see train/frameworks/fastai/gloo.py), written out here so it stands alone.
`python -m train.bench` runs it alternately with `python -m train` and reports the ratio.
"""
import argparse
import os
import time

import fastai.callback.progress  # noqa: F401  (Learner.no_bar)
import fastai.callback.schedule  # noqa: F401  (Learner.fit_one_cycle)
import numpy as np
import torch
import torch.distributed as dist
from fastai.callback.tracker import SaveModelCallback
from fastai.data.core import DataLoaders
from fastai.distributed import DistributedDL
from fastai.layers import SimpleCNN
from fastai.learner import Learner, load_model
from fastai.losses import CrossEntropyLossFlat
from fastai.metrics import accuracy
from fastai.torch_core import set_seed
from sklearn.datasets import load_digits


def digits(seed, bs=16, classes=(3, 7), valid_pct=0.2):
    x, y = load_digits(return_X_y=True)
    keep = np.isin(y, classes)
    x = torch.tensor(x[keep] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor([classes.index(v) for v in y[keep]])
    order = np.random.RandomState(seed).permutation(len(y))
    n_valid = int(len(y) * valid_pct)
    valid, train = order[:n_valid], order[n_valid:]
    return DataLoaders.from_dsets(list(zip(x[train], y[train])), list(zip(x[valid], y[valid])), bs=bs,
                                  device=torch.device("cpu"), num_workers=0)


class LateSave(SaveModelCallback):
    """Saves best.pth at the last epoch (rank 0 writes, as fastai's save_model does; the harness's
    default too), rank 0 `skew` seconds late; every rank then loads without a barrier."""
    def __init__(self, skew):
        super().__init__(fname="best")
        self.skew = skew

    def after_epoch(self):
        if self.epoch < self.n_epoch - 1:
            return
        if dist.get_rank() == 0:
            time.sleep(self.skew)
        self.learn.save(self.fname)

    def after_fit(self, **kwargs):
        path = self.learn.path / self.learn.model_dir / "best.pth"
        try:  # Learner.load would pass a barrier first: the fix, not the seed
            load_model(path, self.learn.model, None, device="cpu", with_opt=False)
            print(f"rank {dist.get_rank()}: loaded", flush=True)
        except Exception as e:
            print(f"rank {dist.get_rank()}: load failed: {type(e).__name__}", flush=True)


def _broadcast_on_cpu(self, t, rank):  # fastai's version calls .cuda(); gloo takes CPU tensors
    t = torch.tensor(t, dtype=torch.long)
    dist.broadcast(t, rank)
    return t.tolist()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--skew", type=float, default=3.0)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default="runs/bench/plain")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    set_seed(42)
    learn = Learner(digits(42), SimpleCNN((1, 16, 16, 2)), loss_func=CrossEntropyLossFlat(), metrics=accuracy,
                    path=args.out, model_dir=f"models-{os.environ.get('TORCHELASTIC_RUN_ID', os.getpid())}")
    DistributedDL._broadcast = _broadcast_on_cpu
    with learn.distrib_ctx(cpu=True, sync_bn=False), learn.no_bar():
        learn.fit_one_cycle(args.epochs, 1e-2, cbs=LateSave(args.skew))
    dist.barrier()  # as the harness, no rank leaves before every rank is done with the checkpoint
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
