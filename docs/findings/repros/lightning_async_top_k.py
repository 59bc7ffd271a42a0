# lightning_async_top_k.py [sync|fixed]   torchrun --standalone --nproc_per_node=2 lightning_async_top_k.py [sync|fixed]
#                                          then: python lightning_async_top_k.py left
# pytorch-lightning and torch only. ModelCheckpoint(save_top_k=1) with AsyncCheckpointIO, as documented; every epoch
# improves, so each save replaces the last. Epoch 0's write lands (rank 0 waits until its file is there); epoch 1's
# write takes 3 s (a slow disk: TorchCheckpointIO.save_checkpoint after a sleep). Once epoch 1's save has returned,
# the job is killed (os._exit, as a preemption); `python lightning_async_top_k.py left` then prints what is left on
# disk. `sync`: the same without AsyncCheckpointIO (the control). `fixed`: AsyncCheckpointIO whose remove_checkpoint
# first waits for the writes already submitted (its public teardown()).
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


def on_disk():
    return sorted(os.listdir(FOLDER)) if os.path.isdir(FOLDER) else []


class SlowIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint, path, storage_options=None):
        if checkpoint["epoch"] == 1:
            time.sleep(3.0)
        super().save_checkpoint(checkpoint, path, storage_options)

    def remove_checkpoint(self, path):
        print(f"rank 0: removing {os.path.basename(path)} | on disk now: {on_disk()}", flush=True)
        super().remove_checkpoint(path)


class WaitThenRemove(AsyncCheckpointIO):
    def remove_checkpoint(self, path):
        self.teardown()  # waits for every write submitted so far (the next save starts the thread again)
        super().remove_checkpoint(path)


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


class Watch(Callback):
    """ModelCheckpoint saves at the end of each epoch, after every other callback; by the start of the next one that
    save has returned. Epoch 0's file is waited for, so a complete checkpoint is on disk before the next save; once
    epoch 1's save has returned, the job dies (os._exit: a preemption, a node lost)."""

    def on_train_epoch_start(self, trainer, module):
        done = trainer.current_epoch
        if done == 1 and trainer.global_rank == 0:
            for _ in range(100):
                if on_disk():
                    break
                time.sleep(0.1)
            print(f"rank 0: save of epoch 0 returned; its file landed | on disk now: {on_disk()}", flush=True)
        trainer.strategy.barrier()
        if done == 2:
            if trainer.global_rank == 0:
                print(f"rank 0: save of epoch 1 returned | on disk now: {on_disk()}", flush=True)
                print("rank 0: killed after 2 saves returned", flush=True)
            os._exit(1)


if sys.argv[1:] == ["left"]:
    print(f"rank 0: left on disk after the kill: {on_disk()}", flush=True)
    sys.exit(0)
torch.manual_seed(0)
data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=16)
checkpoint = ModelCheckpoint(dirpath=FOLDER, monitor="score", mode="max", save_top_k=1)
plugin = {"sync": SlowIO, "fixed": lambda: WaitThenRemove(SlowIO())}.get(sys.argv[1] if sys.argv[1:] else "",
                                                                         lambda: AsyncCheckpointIO(SlowIO()))()
trainer = pl.Trainer(max_epochs=4, accelerator="cpu", devices=2, strategy=DDPStrategy(process_group_backend="gloo"),
                     plugins=[plugin], callbacks=[checkpoint, Watch()],
                     logger=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Model(), data)
