"""Ray Train 2.60's workers (workload=resume, issue 39): the train function of a TorchTrainer as Ray's docs show it,
over the small_cnn and digits_split every adapter shares, on CPU workers over gloo (Ray Train's own process group):

    model = ray.train.torch.prepare_model(small_cnn(1)); loader = ray.train.torch.prepare_data_loader(...)
    checkpoint = ray.train.get_checkpoint()           # Ray's record: the newest checkpoint every worker reported
    if checkpoint: with checkpoint.as_directory() as d: state = torch.load(d/rank_<r>.pt); start = state["epoch"] + 1
    for epoch in range(start, epochs): train; torch.save(state, tmp/rank_<r>.pt)
        ray.train.report(metrics, checkpoint=Checkpoint.from_directory(tmp))   # each worker uploads its part

What the shipped code does (ray/train/v2/_internal/execution/, 2.60): report broadcasts rank 0's folder name
(checkpoint_<time>, context.py), each worker copies its files into that folder on storage (storage.py), and the
controller records the checkpoint once every worker reported (checkpoint/checkpoint_manager.py), keeping
CheckpointConfig.num_to_keep of them. A worker that dies (FailureConfig.max_failures) restarts the whole group;
ray.train.get_checkpoint() then gives the newest recorded checkpoint. A folder some worker never finished is never
recorded, and never deleted by num_to_keep: it stays the newest on storage.

The fixes (cfg["fix"]["name"]):
  as_shipped   Ray's own resume, ray.train.get_checkpoint()
  in_place     the resume from the newest checkpoint_* folder on storage, as users do after a driver crash (and as
               the Trainer and Lightning resume from their own folders): each worker reads its part there
  rank0_leads  the helper users copy (rank0_leads.py): a marker written by rank 0 once every worker's report
               returned; rank 0 picks the newest folder with its marker and sends the name to every worker
Seams: RunConfig(storage_filesystem=...) (seams.py), where each part's upload is observed and the faults act.
Events: those of train/frameworks/torch_loop/ (path: a checkpoint folder), shard_write / shard_read (each part).
Each worker counts its own starts (train.events.set_attempt): Ray's restart of the group is the next attempt.
"""
import os
import socket
import tempfile
from pathlib import Path

import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from train.events import EventLog, attempt, set_attempt
from train.faults import Faults
from train.fixes import SyncFailed, watched
from train.frameworks.ray_train import seams
from train.frameworks.ray_train.rank0_leads import MARKER, Rank0Checkpoints
from train.frameworks.ray_train.ways import BY_FIX
from train.toolkit.errors import error_fields
from train.toolkit.model import digits_split, small_cnn, weights_digest
from train.toolkit.rank import Rank, checkpoint_dir, node_disk, say
from train.toolkit.resume import start_attempt

STARTS = "ray-starts"  # in the run dir: each worker's starts, one byte each (its attempt)


def train_loop_per_worker(config: dict):
    """TorchTrainer's train function, on every worker; config: the run's cfg, plan and run dir (driver.py)."""
    cfg, plan, run_dir = config["cfg"], config["plan"], config["run_dir"]
    context = ray.train.get_context()
    me = context.get_world_rank()
    set_attempt(count_start(run_dir, me))  # before the first event: each one carries the attempt
    events = EventLog(run_dir, me)
    events.record("rank_start", pid=os.getpid(), host=socket.gethostname(), node=context.get_node_rank(),
                  launcher_node_rank=cfg["node_rank"], framework=cfg["framework"]["name"], node_disk=node_disk(cfg),
                  device=plan["device"], backend=plan["backend"], elastic_restart_count=attempt())
    torch.set_num_threads(1)  # the workers share the cores
    faults = Faults(cfg, events, say)
    seams.UPLOADS = seams.Uploads(me, events, faults, cfg["timeout"]["collective_s"])
    try:
        RayResume(Rank(cfg, plan, run_dir, events, faults, torch.device("cpu"))).run()
    finally:
        seams.UPLOADS = None
    events.record("rank_end")
    events.close()


def count_start(run_dir: str, rank: int) -> int:
    """This worker's start number minus one: the attempt (Ray restarts every worker of the group together)."""
    path = Path(run_dir) / STARTS / f"rank{rank}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(b".")
        return f.tell() - 1


class RayResume:
    def __init__(self, rank: Rank):
        cfg = rank.cfg
        self.rank, self.cfg, self.events, self.faults = rank, cfg, rank.events, rank.faults
        self.way = BY_FIX[cfg["fix"]["name"]]
        self.folder = Path(checkpoint_dir(cfg))  # RunConfig's storage_path/name: checkpoint_<time>/ folders
        self.me = dist.get_rank()
        self.leads = Rank0Checkpoints(self.folder) if self.way.leads else None

    def run(self):
        cfg, data = self.cfg, self.cfg["data"]
        start_attempt(self.rank, self.folder, empty=lambda folder: None)  # the driver emptied it (driver.py)
        torch.manual_seed(cfg["seed"])
        x_train, y_train, _, _ = digits_split(data, cfg["seed"])
        loader = ray.train.torch.prepare_data_loader(
            DataLoader(TensorDataset(x_train, y_train), batch_size=data["batch_size"], shuffle=True))
        self.steps_per_epoch = len(loader)
        self.model = ray.train.torch.prepare_model(small_cnn(1))  # DDP over Ray's process group
        optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg["lr"])  # no state: the checkpoint is the model

        start = self.resume()
        self.events.record("fit_start", train_batches=self.steps_per_epoch, node_local=cfg["checkpoint"]["node_local"],
                           start_epoch=start)
        epoch = start
        try:
            for epoch in range(start, cfg["epochs"]):
                if hasattr(loader.sampler, "set_epoch"):
                    loader.sampler.set_epoch(epoch)
                self.model.train()
                for x, y in loader:
                    loss = F.cross_entropy(self.model(x), y)
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                say(f"epoch {epoch} trained")
                self.save(epoch, float(loss))
        except SyncFailed:
            raise RuntimeError("a sync failed (recorded)") from None
        except Exception as e:  # recorded, then the worker dies: Ray restarts the group (FailureConfig)
            self.events.record("train_error", epoch=epoch, **error_fields(e))
            raise
        self.events.record("train_end")
        self.events.record("final", digest=weights_digest(dict(self.module.named_parameters())))

    @property
    def module(self):
        return getattr(self.model, "module", self.model)

    def digest(self) -> str:
        return weights_digest(self.module.state_dict())

    def folders(self) -> list:
        """The checkpoint folders on storage, oldest first (Ray's names hold the time they were made)."""
        return sorted(p for p in self.folder.iterdir() if p.is_dir() and p.name.startswith("checkpoint_")) \
            if self.folder.is_dir() else []

    # --- the resume ---
    def chosen(self):
        """The folder this worker resumes from (None: a fresh start), and the names it listed."""
        listed = [p.name for p in self.folders()]
        if self.leads:
            name = self.leads.newest()
            return (self.folder / name if name else None), listed
        if self.way.newest_folder:
            return (self.folder / listed[-1] if listed else None), listed
        checkpoint = ray.train.get_checkpoint()  # Ray's record
        return (Path(checkpoint.path) if checkpoint else None), listed

    def resume(self) -> int:
        """Read this worker's part of the folder chosen; the epoch to start from. A failed read is recorded and
        raised: the worker dies, and Ray restarts the group while failures remain (FailureConfig)."""
        path, listed = self.chosen()
        if path is None:
            self.events.record("resume", epoch=-1, step=0, path=None, digest=self.digest(), listing=listed)
            return 0
        part = path / seams.part_name(self.me)
        self.events.record("load_attempt", path=str(path), bytes=part.stat().st_size if part.is_file() else None)
        try:
            state = torch.load(part, weights_only=True)
            self.module.load_state_dict(state["model"])
        except Exception as e:
            self.events.record("load_error", path=str(part), **error_fields(e))
            say(f"Resume from {path.name} failed: {type(e).__name__}: {e}")
            raise
        epoch, step = state["epoch"], state["step"]
        self.events.record("shard_read", step=step, shard=self.me, digest=weights_digest(state["model"]),
                           path=str(path))
        self.events.record("resume", epoch=epoch, step=step, path=str(path), digest=self.digest(), listing=listed)
        say(f"Resumed from {path.name} (epoch {epoch}, step {step}).")
        return epoch + 1

    # --- the save ---
    def save(self, epoch: int, loss: float):
        """Every worker saves its part and reports it (Ray uploads it into the folder rank 0 named). Rank 0
        records save_end once every worker's report returned (a barrier of race-lab's: the controller records
        the checkpoint then too), then the scenario's kill after the save."""
        step = (epoch + 1) * self.steps_per_epoch
        for buffer in self.module.buffers():  # rank 0's BatchNorm statistics on every rank, as DDP's forward does
            dist.broadcast(buffer, src=0)
        weights = self.module.state_dict()
        digest = weights_digest(weights)
        uploads = seams.UPLOADS
        uploads.saving = (epoch, step, digest)
        with tempfile.TemporaryDirectory() as tmp:
            torch.save({"model": weights, "epoch": epoch, "step": step}, Path(tmp) / seams.part_name(self.me))
            checkpoint = ray.train.Checkpoint.from_directory(tmp)
            if self.leads:
                self.leads.report({"epoch": epoch, "loss": loss}, checkpoint)
            else:
                ray.train.report({"epoch": epoch, "loss": loss}, checkpoint=checkpoint)
        uploads.saving = None
        if not self.leads and not watched(self.events, "barrier", dist.barrier):
            raise SyncFailed
        if self.me == 0:
            path = uploads.folder
            self.events.record("save_end", epoch=epoch, step=step, path=str(path), digest=digest,
                               bytes=sum(f.stat().st_size for f in path.iterdir() if f.name != MARKER))
            self.faults.kill_point("after_save", epoch, path)
