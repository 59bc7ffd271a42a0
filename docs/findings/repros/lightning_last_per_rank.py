# lightning_last_per_rank.py JOB  (job 1 trains 2 epochs; job 2, the next job, resumes and trains to epoch 4)
#   one host:  torchrun --standalone --nproc_per_node=2 lightning_last_per_rank.py 1 && \
#              torchrun --standalone --nproc_per_node=2 lightning_last_per_rank.py 2
#   two nodes: torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 \
#              lightning_last_per_rank.py 1 && \
#              torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=HOST:29501 \
#              lightning_last_per_rank.py 2   (on each node; here two agents side by side on one host)
# pytorch-lightning and torch only. Each rank keeps its checkpoints on its own disk (no shared filesystem): the folder
# disk<rank>/ stands for it. Every job starts with the documented resume, fit(ckpt_path="last").
import os
import sys
from datetime import timedelta

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset

job = int(sys.argv[1])


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_train_start(self):
        print(f"job {job} rank {self.global_rank}: starts at epoch {self.current_epoch}, step {self.global_step}",
              flush=True)


torch.manual_seed(0)
data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8)
saver = ModelCheckpoint(dirpath=f"disk{os.environ['RANK']}/ckpt", save_last=True, every_n_epochs=1)
trainer = pl.Trainer(accelerator="cpu", devices=int(os.environ["LOCAL_WORLD_SIZE"]),
                     num_nodes=int(os.environ["WORLD_SIZE"]) // int(os.environ["LOCAL_WORLD_SIZE"]),
                     max_epochs=2 * job, callbacks=[saver],
                     strategy=DDPStrategy(process_group_backend="gloo", timeout=timedelta(seconds=10)),
                     logger=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Model(), data, ckpt_path="last")  # the docs' resume: every job starts with this
print(f"job {job} rank {trainer.global_rank}: finished at epoch {trainer.current_epoch}", flush=True)
