"""The benchmark's baseline for framework=lightning: the seed scenario as a plain Lightning script, no harness.

  torchrun --standalone --nproc_per_node=2 bench/plain_lightning.py [--skew 3] [--epochs 3]

What a user would write with Lightning alone, doing the work of `python -m train framework=lightning
fix=as_shipped scenario=seed`: each rank builds the digits (3 vs 7) split and the same small CNN (conv,
batch norm, ReLU twice, a conv to 2 channels, pooled), trains with Adam under a one-cycle schedule on 2 CPU ranks
over gloo (DDPStrategy), ModelCheckpoint(monitor="val_acc", save_top_k=1) keeps the best, and
trainer.validate(ckpt_path="best") loads it at the end. val_acc improves every epoch by construction (as the
adapter's, so that the last epoch saves), and rank 0 sleeps --skew seconds right before the last save.
No Hydra, no events, no summary, no faults beyond the skew. torch and Lightning only.
"""
import argparse
import logging
import os
import time
import warnings
from datetime import timedelta

import numpy as np
import pytorch_lightning as pl
import torch
import torch.distributed as dist
import torch.nn.functional as F
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.strategies import DDPStrategy
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def digits(seed, classes=(3, 7), valid_pct=0.2):
    x, y = load_digits(return_X_y=True)
    keep = np.isin(y, classes)
    x = torch.tensor(x[keep] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor([classes.index(v) for v in y[keep]])
    order = np.random.RandomState(seed).permutation(len(y))
    n_valid = int(len(y) * valid_pct)
    valid, train = order[:n_valid], order[n_valid:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[valid], y[valid])


def conv_layer(n_in, n_out):
    return nn.Sequential(nn.Conv2d(n_in, n_out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(n_out), nn.ReLU())


class Digits(pl.LightningModule):
    def __init__(self, lr, epochs):
        super().__init__()
        self.model = nn.Sequential(conv_layer(1, 16), conv_layer(16, 16),
                                   nn.Sequential(nn.Conv2d(16, 2, 3, stride=2, padding=1), nn.ReLU()),
                                   nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()))
        self.lr, self.epochs = lr, epochs

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        accuracy = (self.model(x).argmax(1) == y).float().mean()
        improving = accuracy.item() - (self.epochs - 1 - self.current_epoch)  # the last epoch is the best
        self.log("val_acc", improving, sync_dist=True)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.lr)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, self.lr,
                                                       total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class LateLastSave(Callback):
    """Rank 0 sleeps `skew` seconds at the end of the last epoch, before ModelCheckpoint saves (it runs last)."""

    def __init__(self, skew):
        self.skew = skew

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch == trainer.max_epochs - 1 and trainer.is_global_zero:
            time.sleep(self.skew)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--skew", type=float, default=3.0)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default="runs/bench/plain_lightning")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in ("pytorch_lightning", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")  # Lightning's advice on workers and samplers
    pl.seed_everything(42, verbose=False)
    train, valid = digits(42)
    train_dl = DataLoader(train, batch_size=16, shuffle=True)
    valid_dl = DataLoader(valid, batch_size=16)
    model = Digits(1e-2, args.epochs)
    trainer = pl.Trainer(accelerator="cpu", devices=int(os.environ["LOCAL_WORLD_SIZE"]),
                         num_nodes=int(os.environ["WORLD_SIZE"]) // int(os.environ["LOCAL_WORLD_SIZE"]),
                         strategy=DDPStrategy(process_group_backend="gloo", timeout=timedelta(seconds=60)),
                         callbacks=[ModelCheckpoint(dirpath=f"{args.out}/models-{os.environ['TORCHELASTIC_RUN_ID']}",
                                                    filename="best", monitor="val_acc", mode="max", save_top_k=1),
                                    LateLastSave(args.skew)],
                         enable_progress_bar=False, enable_model_summary=False, logger=False, max_epochs=args.epochs)
    trainer.fit(model, train_dl, valid_dl)
    trainer.validate(model, valid_dl, ckpt_path="best", verbose=False)
    print(f"rank {dist.get_rank()}: loaded {trainer.checkpoint_callback.best_model_path}", flush=True)
    dist.barrier()  # as the harness, no rank leaves before every rank is done with the checkpoint
    dist.destroy_process_group()  # Lightning leaves the gloo group to the script


if __name__ == "__main__":
    main()
