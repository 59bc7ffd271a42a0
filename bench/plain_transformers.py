"""The benchmark's baseline for framework=transformers: one of our runs as a plain script, no harness around it.

  torchrun --standalone --nproc_per_node=2 bench/plain_transformers.py [--epochs 3] [--out runs/bench/plain_tf]

What a user would write with the Trainer alone: each rank builds the digits (3 vs 7) split and the same small
CNN as race-lab's (fastai's SimpleCNN in plain torch), trains it with a Trainer whose TrainingArguments keep the
best checkpoint by validation accuracy (load_best_model_at_end=True) on CPU ranks over gloo, and the Trainer
loads the best one at the end. No faults, no events, no summary: each rank prints one line with the digest of the
weights it ends with. The gloo group is created here with a timeout, as race-lab's worker does (the Trainer ignores
ddp_timeout with use_cpu=True, transformers 5.23).
"""
import argparse
import hashlib
import os
import shutil
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from transformers import Trainer, TrainingArguments, set_seed


def conv_layer(n_in, n_out):
    return nn.Sequential(nn.Conv2d(n_in, n_out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(n_out), nn.ReLU())


class Classifier(nn.Module):
    """fastai's SimpleCNN((1, 16, 16, 2)) in plain torch; forward returns what the Trainer reads."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(conv_layer(1, 16), conv_layer(16, 16),
                                 nn.Sequential(nn.Conv2d(16, 2, 3, stride=2, padding=1), nn.ReLU()),
                                 nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()))

    def forward(self, pixel_values, labels=None):
        logits = self.net(pixel_values)
        return {"loss": nn.functional.cross_entropy(logits, labels) if labels is not None else None, "logits": logits}


def digits(seed, classes=(3, 7), valid_pct=0.2):
    """(train, valid) as lists of the Trainer's examples, the same split on every rank."""
    x, y = load_digits(return_X_y=True)
    keep = np.isin(y, classes)
    x = torch.tensor(x[keep] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor([classes.index(v) for v in y[keep]])
    order = np.random.RandomState(seed).permutation(len(y))
    n_valid = int(len(y) * valid_pct)
    as_examples = lambda idx: [{"pixel_values": x[i], "labels": y[i]} for i in idx]  # noqa: E731
    return as_examples(order[n_valid:]), as_examples(order[:n_valid])


def accuracy(prediction):
    return {"accuracy": float((np.argmax(prediction.predictions, axis=-1) == prediction.label_ids).mean())}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", default="runs/bench/plain_tf")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))  # the Trainer (accelerate) uses this group
    if int(os.environ["LOCAL_RANK"]) == 0:
        shutil.rmtree(args.out, ignore_errors=True)  # an earlier run's checkpoints
    dist.barrier()

    set_seed(args.seed)
    train, valid = digits(args.seed)
    trainer = Trainer(
        model=Classifier(), train_dataset=train, eval_dataset=valid, compute_metrics=accuracy,
        args=TrainingArguments(
            output_dir=args.out, eval_strategy="epoch", save_strategy="epoch", load_best_model_at_end=True,
            metric_for_best_model="accuracy", greater_is_better=True, num_train_epochs=args.epochs,
            learning_rate=args.lr, per_device_train_batch_size=16, per_device_eval_batch_size=16, use_cpu=True,
            report_to=[], disable_tqdm=True, logging_strategy="no", ddp_backend="gloo", seed=args.seed,
            ddp_find_unused_parameters=False))
    trainer.train()  # keeps the best checkpoint and loads it at the end

    h = hashlib.sha256()
    for name, tensor in sorted(trainer.model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    print(f"rank {dist.get_rank()}: best {trainer.state.best_model_checkpoint}, weights {h.hexdigest()[:16]}",
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
