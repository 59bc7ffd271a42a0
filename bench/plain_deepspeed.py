"""The benchmark's baseline for framework=deepspeed: its resume as a plain script, no harness.

  torchrun --standalone --nproc_per_node=2 bench/plain_deepspeed.py [--epochs 3]

What a user would write with DeepSpeed alone (0.19.8), as its docs show the resume: each rank builds the digits
(3 vs 7) split and the small CNN, deepspeed.initialize with ZeRO-1 on the CPU accelerator (gloo), then
engine.load_checkpoint(<dir>) once at the start (a fresh folder: DeepSpeed finds no `latest` and starts over), and
engine.save_checkpoint(<dir>, client_state={"epoch": e}) after every epoch (python -m train framework=deepspeed
fix=as_shipped). No Hydra, no events, no summary. It prints each epoch's loss and where each rank resumed.
"""
import argparse
import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # no GPU: DeepSpeed's CPU accelerator, gloo
import deepspeed  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402


def digits(seed, classes=(3, 7), valid_pct=0.2):
    """The harness's split (train/toolkit/ digits_split): the training part."""
    x, y = load_digits(return_X_y=True)
    keep = np.isin(y, classes)
    x = torch.tensor(x[keep] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor([classes.index(v) for v in y[keep]])
    order = np.random.RandomState(seed).permutation(len(y))
    train = order[int(len(y) * valid_pct):]
    return TensorDataset(x[train], y[train])


def small_cnn():
    """fastai's simple_cnn((1, 16, 16, 2)) in plain torch, as the harness builds it."""
    def conv(n_in, n_out):
        return nn.Sequential(nn.Conv2d(n_in, n_out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(n_out),
                             nn.ReLU())
    return nn.Sequential(conv(1, 16), conv(16, 16), nn.Sequential(nn.Conv2d(16, 2, 3, stride=2, padding=1), nn.ReLU()),
                         nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default="runs/bench/plain-deepspeed")  # checkpoints go to <out>/<run id>/
    args = parser.parse_args()
    torch.set_num_threads(1)
    folder = os.path.join(args.out, os.environ.get("TORCHELASTIC_RUN_ID", str(os.getpid())))
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(42)
    train = digits(42)
    sampler = DistributedSampler(train, shuffle=True, seed=42)
    loader = DataLoader(train, batch_size=16, sampler=sampler)
    model = small_cnn()
    config = {"train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": 1}, "zero_allow_untested_optimizer": True, "steps_per_print": 10 ** 9}
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01,
                                                                             momentum=0.9), config=config)
    path, client = engine.load_checkpoint(folder)  # (None, None) in a fresh folder: start over
    start = client["epoch"] + 1 if path else 0
    print(f"rank {dist.get_rank()}: {'resumed from ' + path if path else 'no checkpoint, starting fresh'}",
          flush=True)
    for epoch in range(start, args.epochs):
        sampler.set_epoch(epoch)
        engine.train()
        for x, y in loader:
            loss = F.cross_entropy(engine(x), y)
            engine.backward(loss)
            engine.step()
        if dist.get_rank() == 0:
            print(f"epoch {epoch}  loss {loss.item():.6f}", flush=True)
        engine.save_checkpoint(folder, client_state={"epoch": epoch})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
