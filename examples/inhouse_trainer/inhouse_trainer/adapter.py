"""race-lab's adapter for the in-house trainer: race-lab's small model and data, the trainer's own save and load,
race-lab's faults at the trainer's hooks, and the events race-lab's judge reads (train/judge/vocabulary.py)."""

import shutil

import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from inhouse_trainer.trainer import Hooks, InHouseTrainer
from train.fixes import SyncFailed, watched
from train.toolkit.errors import error_fields
from train.toolkit.model import digits_split, small_cnn, weights_digest
from train.toolkit.rank import Rank, checkpoint_dir, local_rank, say


class Observed(Hooks):
    """The trainer's hooks with race-lab's faults placed and its events recorded."""

    def __init__(self, rank: Rank):
        self.events, self.faults = rank.events, rank.faults

    def metric(self, accuracy, epoch):
        return self.faults.shape_metric(accuracy, epoch)

    def before_last_save(self):
        self.faults.before_last_save()

    def saving(self, epoch, path):
        self.events.record("save_start", epoch=epoch, path=str(path))

    def write(self, f, data, last):
        self.faults.write(f, data, last)

    def saved(self, epoch, path, state, size):
        self.events.record("save_end", epoch=epoch, path=str(path), digest=weights_digest(state), bytes=size)

    def save_failed(self, epoch, error):
        self.events.record("save_error", epoch=epoch, **error_fields(error))

    def before_load(self, path):
        self.faults.before_load()
        self.events.record("load_attempt", path=str(path), bytes=path.stat().st_size if path.exists() else None)


def fit_and_load(rank: Rank):
    cfg, data = rank.cfg, rank.cfg["data"]
    folder = checkpoint_dir(cfg)
    if not cfg["checkpoint"]["keep_existing"] and local_rank() == 0:
        shutil.rmtree(folder, ignore_errors=True)
    x_train, y_train, x_valid, y_valid = digits_split(data, cfg["seed"])
    train = TensorDataset(x_train, y_train)
    trainer = InHouseTrainer(
        DistributedDataParallel(small_cnn(1)),
        DataLoader(train, batch_size=data["batch_size"], sampler=DistributedSampler(train, seed=cfg["seed"])),
        DataLoader(TensorDataset(x_valid, y_valid), batch_size=data["batch_size"]),
        folder,
        cfg["epochs"],
        cfg["lr"],
        hooks=Observed(rank),
        barrier=watched_barrier(rank) if cfg["fix"]["name"] == "barrier" else None,
    )
    rank.events.record("fit_start", train_batches=len(trainer.train_dl), node_local=cfg["checkpoint"]["node_local"])
    trainer.load_best = load_recorded(trainer, rank)  # the trainer's own load, its result recorded
    trainer.fit()
    rank.events.record("final", digest=weights_digest(trainer.state()))


def watched_barrier(rank: Rank):
    """fix=barrier: dist.barrier() between the last save and the load, with race-lab's sync events around it."""

    def barrier():
        if not watched(rank.events, "barrier", dist.barrier):
            raise SyncFailed("the barrier before the load failed")

    return barrier


def load_recorded(trainer: InHouseTrainer, rank: Rank):
    load_best = trainer.load_best

    def load():
        rank.events.record("train_end")
        try:
            load_best()
        except SyncFailed:  # said by its sync events
            return
        except Exception as e:
            rank.events.record("load_error", **error_fields(e))
            say(f"Load failed: {type(e).__name__}: {e}")
            return
        rank.events.record("load_done", path=str(trainer.path), digest=weights_digest(trainer.state()))

    return load
