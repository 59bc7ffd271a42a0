# lightning_async_top_k.py [sync]   torchrun --standalone --nproc_per_node=2 lightning_async_top_k.py [sync]
#                                    then: python lightning_async_top_k.py left
# pytorch-lightning and torch only. ModelCheckpoint(save_top_k=1) with AsyncCheckpointIO, as documented; each write
# takes 1.5 s (a slow disk: TorchCheckpointIO.save_checkpoint after a sleep). Every epoch improves, so each save
# replaces the last. After each save returns, rank 0 prints what is on disk; after the 3rd, the job is killed
# (os._exit, as a preemption); `python lightning_async_top_k.py left` then prints what is left on disk. `sync`: the
# same without AsyncCheckpointIO (the control).
import os
import sys
import time

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, ModelCheckpoint
from pytorch_lightning.plugins import AsyncCheckpointIO, TorchCheckpointIO
from pytorch_lightning.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset

FOLDER = "ckpts"


class SlowIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint, path, storage_options=None):
        time.sleep(1.5)
        super().save_checkpoint(checkpoint, path, storage_options)

    def remove_checkpoint(self, path):
        print(f"rank 0: removing {os.path.basename(path)} | on disk now: {on_disk()}", flush=True)
        super().remove_checkpoint(path)


def on_disk():
    return sorted(os.listdir(FOLDER)) if os.path.isdir(FOLDER) else []


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def on_train_epoch_end(self):
        self.log("score", float(self.current_epoch), sync_dist=True)  # rises every epoch: each is the new best

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class KillAfter(Callback):
    """ModelCheckpoint saves at the end of each epoch, after every other callback; by the start of the next one that
    save has returned. After the 3rd has returned, the job dies (os._exit: a preemption, a node lost)."""

    def on_train_epoch_start(self, trainer, module):
        done = trainer.current_epoch
        if done and trainer.global_rank == 0:
            print(f"rank 0: save of epoch {done - 1} returned | on disk now: {on_disk()}", flush=True)
        if done == 3:
            print(f"rank {trainer.global_rank}: killed after 3 saves returned", flush=True)
            os._exit(1)


if sys.argv[1:] == ["left"]:
    print(f"rank 0: left on disk after the kill: {on_disk()}", flush=True)
    sys.exit(0)
torch.manual_seed(0)
data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=16)
checkpoint = ModelCheckpoint(dirpath=FOLDER, monitor="score", mode="max", save_top_k=1)
trainer = pl.Trainer(max_epochs=5, accelerator="cpu", devices=2, strategy=DDPStrategy(process_group_backend="gloo"),
                     plugins=[SlowIO() if sys.argv[1:] == ["sync"] else AsyncCheckpointIO(SlowIO())],
                     callbacks=[checkpoint, KillAfter()],
                     logger=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Model(), data)
