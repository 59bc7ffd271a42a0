"""The in-house trainer: DDP over whatever process group is there, the best model kept on rank 0 with torch.save,
and every rank loading it when fit ends. Hooks are its public seams (a trainer's callbacks): metric, before the
last save, the bytes' write, around a save, before the load. `barrier`, if given, runs between the last save and
the load; the trainer as written has none."""

import io
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F


class Hooks:
    """What a user of the trainer may override; each does nothing by default."""

    def metric(self, accuracy: float, epoch: int) -> float:
        return accuracy  # the value a new best is judged by

    def before_last_save(self):
        pass

    def saving(self, epoch: int, path: Path):  # rank 0, before it writes
        pass

    def write(self, f, data: bytes, last: bool):  # rank 0: the checkpoint's bytes into the open file
        f.write(data)

    def saved(self, epoch: int, path: Path, state: dict, size: int):  # rank 0, after it wrote
        pass

    def save_failed(self, epoch: int, error: OSError):  # rank 0
        pass

    def before_load(self, path: Path):  # every rank
        pass


class InHouseTrainer:
    def __init__(self, model, train_dl, valid_dl, folder, epochs: int, lr: float, hooks=None, barrier=None):
        self.model, self.train_dl, self.valid_dl, self.epochs = model, train_dl, valid_dl, epochs
        self.path = Path(folder) / "best.pt"
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.hooks, self.barrier = hooks or Hooks(), barrier

    def fit(self):
        best = None
        for epoch in range(self.epochs):
            self.train_one_epoch()
            value = self.hooks.metric(self.accuracy(), epoch)
            last = epoch == self.epochs - 1
            if last:
                self.hooks.before_last_save()
            if best is None or value > best:
                best = value
                self.save_best(epoch, last)
        self.load_best()

    def train_one_epoch(self):
        self.model.train()
        for x, y in self.train_dl:
            F.cross_entropy(self.model(x), y).backward()
            self.optimizer.step()
            self.optimizer.zero_grad()

    def accuracy(self) -> float:
        """Over every rank's share, so that every rank sees the same improvement."""
        self.model.eval()
        counts = torch.zeros(2)
        with torch.no_grad():
            for x, y in self.valid_dl:
                counts += torch.tensor([(self.model(x).argmax(dim=1) == y).sum().item(), len(y)])
        dist.all_reduce(counts)
        return (counts[0] / counts[1]).item()

    def state(self) -> dict:
        return getattr(self.model, "module", self.model).state_dict()

    def save_best(self, epoch: int, last: bool):
        if dist.get_rank() != 0:
            return
        state = {k: v.detach().clone() for k, v in self.state().items()}
        buffer = io.BytesIO()
        torch.save(state, buffer)
        self.hooks.saving(epoch, self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "wb") as f:
                self.hooks.write(f, buffer.getvalue(), last)
        except OSError as e:  # logged, and training goes on, as many trainers do
            self.hooks.save_failed(epoch, e)
            return
        self.hooks.saved(epoch, self.path, state, self.path.stat().st_size)

    def load_best(self):
        if self.barrier is not None:
            self.barrier()
        self.hooks.before_load(self.path)
        getattr(self.model, "module", self.model).load_state_dict(torch.load(self.path, weights_only=True))
