"""The benchmark's baseline for framework=accelerate: the seed scenario as a plain script, no harness.

  torchrun --standalone --nproc_per_node=2 bench/plain_accelerate.py [--skew 3] [--epochs 3]

What a user would write with Accelerate alone (1.15): each rank builds the digits (3 vs 7) split and the
small CNN, prepares the model and the data loaders, trains, evaluates (gathering the predictions), and
calls `accelerator.save_state(<dir>/best)` whenever the validation accuracy is a new best; rank 0
sleeps --skew seconds before the last epoch's save, and every rank then calls `load_state` on the same
folder at the end, without `accelerator.wait_for_everyone()` (python -m train framework=accelerate
fix=as_shipped). No Hydra, no events, no summary. It prints each epoch's accuracy and which save
each rank ended up with.
"""
import argparse
import hashlib
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def digits(seed, classes=(3, 7), valid_pct=0.2):
    """The harness's split (train/toolkit/ digits_split), as two data sets."""
    x, y = load_digits(return_X_y=True)
    keep = np.isin(y, classes)
    x = torch.tensor(x[keep] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor([classes.index(v) for v in y[keep]])
    order = np.random.RandomState(seed).permutation(len(y))
    n_valid = int(len(y) * valid_pct)
    valid, train = order[:n_valid], order[n_valid:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[valid], y[valid])


def small_cnn():
    """fastai's simple_cnn((1, 16, 16, 2)) in plain torch, as the harness builds it."""
    def conv(n_in, n_out):
        return nn.Sequential(nn.Conv2d(n_in, n_out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(n_out),
                             nn.ReLU())
    return nn.Sequential(conv(1, 16), conv(16, 16), nn.Sequential(nn.Conv2d(16, 2, 3, stride=2, padding=1), nn.ReLU()),
                         nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()))


def digest(model) -> str:
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--skew", type=float, default=3.0)  # rank 0 is this late at the last epoch's save
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default="runs/bench/plain-accelerate")  # the checkpoint goes to <out>/<run id>/best
    args = parser.parse_args()
    torch.set_num_threads(1)
    folder = os.path.join(args.out, os.environ.get("TORCHELASTIC_RUN_ID", str(os.getpid())), "best")
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(project_dir=args.out))
    set_seed(42)
    train, valid = digits(42)
    model = small_cnn()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)  # not prepared: save_state keeps the model only
    model, train_dl, valid_dl = accelerator.prepare(model, DataLoader(train, batch_size=16, shuffle=True),
                                                    DataLoader(valid, batch_size=16))
    best, saves = None, {}
    for epoch in range(args.epochs):
        model.train()
        for x, y in train_dl:
            accelerator.backward(F.cross_entropy(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for x, y in valid_dl:
                predictions, targets = accelerator.gather_for_metrics((model(x).argmax(dim=1), y))
                correct, total = correct + (predictions == targets).sum().item(), total + len(targets)
        accuracy = correct / total
        accelerator.print(f"epoch {epoch}  accuracy {accuracy:.6f}")
        if best is None or accuracy > best:
            best = accuracy
            if epoch == args.epochs - 1 and accelerator.is_main_process:
                time.sleep(args.skew)
            accelerator.save_state(folder)
            saves[digest(model)] = epoch
    # the docs put accelerator.wait_for_everyone() here; without it a rank may read an older save
    accelerator.load_state(folder)
    held = digest(model)
    print(f"rank {accelerator.process_index}: loaded the epoch-{saves.get(held, '?')} save "
          f"(the last save was epoch {max(saves.values())})", flush=True)
    accelerator.wait_for_everyone()  # as the harness, no rank leaves before every rank is done with the checkpoint
    accelerator.end_training()


if __name__ == "__main__":
    main()
