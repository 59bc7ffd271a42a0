# ray_train_partial_folder.py: python ray_train_partial_folder.py
# Ray Train and torch only. A TorchTrainer of 2 CPU workers over gloo, Ray's default checkpoint folder names,
# CheckpointConfig(num_to_keep=2), FailureConfig(max_failures=1). Each epoch every worker saves its part,
# rank_<r>.pt, and reports it with ray.train.report; then ray.train.get_all_reported_checkpoints() (it returns once
# Ray has processed the report). In epoch 1 of the first attempt, rank 1 is SIGKILLed (a node lost) inside Ray's
# upload of its part, once rank 0's report of epoch 1 has returned: the storage filesystem (RunConfig's
# storage_filesystem, the local disk) kills it as Ray opens rank_1.pt there. Ray restarts both workers. Each
# worker writes what it sees to a file of its own; this process prints them once fit() returns.
import os
import signal
import tempfile
import time
from pathlib import Path

import ray
import ray.train
import ray.train.torch
import torch
from fsspec.implementations.local import LocalFileSystem
from pyarrow.fs import FSSpecHandler, PyFileSystem
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def say(here, attempt, rank, text):
    with open(Path(here) / "seen" / f"{attempt}-{rank}", "a") as f:
        f.write(f"attempt {attempt} rank {rank}: {text}\n")


def describe(folder):
    """A checkpoint folder by its contents: the epoch and attempt its parts hold, and which parts are there."""
    parts = sorted(p.name for p in Path(folder).glob("rank_*.pt"))
    if not parts:
        return "no part"
    state = torch.load(Path(folder) / parts[0], weights_only=True)
    return f"epoch {state['epoch']} of attempt {state['attempt']} ({', '.join(parts)})"


class Disk(FSSpecHandler):
    """The local disk; it SIGKILLs rank 1 as Ray opens its part of epoch 1 in the first attempt."""

    def __init__(self, here):
        super().__init__(LocalFileSystem())
        self.here = here

    def open_output_stream(self, path, metadata):
        if os.environ.get("SAVING") == "attempt 0 epoch 1" and path.endswith("/rank_1.pt"):
            while not (Path(self.here) / "rank0_reported").exists():  # rank 0's part of epoch 1 is on storage
                time.sleep(0.05)
            say(self.here, 0, 1, "SIGKILLed inside Ray's upload of its part of epoch 1")
            (Path(self.here) / "killed").touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().open_output_stream(path, metadata)


def train_fn(config):
    here = config["here"]
    rank = ray.train.get_context().get_world_rank()
    attempt = 1 if (Path(here) / "killed").exists() else 0
    storage = Path(here) / "storage" / "run"
    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(torch.nn.Linear(4, 2))  # DDP over gloo
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    start, checkpoint = 0, ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder:
            state = torch.load(Path(folder) / f"rank_{rank}.pt", weights_only=True)
            model.module.load_state_dict(state["model"])
            start = state["epoch"] + 1
            folders = sorted(p for p in storage.iterdir() if p.is_dir() and p.name.startswith("checkpoint_"))
            say(here, attempt, rank, f"ray.train.get_checkpoint() gives {describe(folder)}; the newest "
                                     f"checkpoint_* folder on storage holds {describe(folders[-1])}")
    for epoch in range(start, 3):
        for _ in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        with tempfile.TemporaryDirectory() as tmp:
            torch.save({"epoch": epoch, "attempt": attempt, "model": model.module.state_dict()},
                       Path(tmp) / f"rank_{rank}.pt")
            os.environ["SAVING"] = f"attempt {attempt} epoch {epoch}"  # read by Disk, in this process
            ray.train.report({"epoch": epoch}, checkpoint=ray.train.Checkpoint.from_directory(tmp))
        say(here, attempt, rank, f"reported epoch {epoch}")
        if attempt == 0 and epoch == 1 and rank == 0:
            (Path(here) / "rank0_reported").touch()
        recorded = ray.train.get_all_reported_checkpoints()  # rank 0, epoch 1, attempt 0: waits until stopped
    if rank == 0:
        folders = sorted(p for p in storage.iterdir() if p.is_dir() and p.name.startswith("checkpoint_"))
        say(here, attempt, rank, f"finished; Ray's record holds {len(recorded)}: "
                                 + "; ".join(describe(r.checkpoint.path) for r in recorded)
                                 + f"; storage holds {len(folders)} checkpoint_* folders: "
                                 + "; ".join(describe(p) for p in folders))


if __name__ == "__main__":
    here = os.getcwd()
    (Path(here) / "seen").mkdir()
    ray.init(include_dashboard=False, num_cpus=2)
    try:
        TorchTrainer(
            train_fn, train_loop_config={"here": here},
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            run_config=RunConfig(name="run", storage_path=str(Path(here) / "storage"),
                                 storage_filesystem=PyFileSystem(Disk(here)),
                                 checkpoint_config=CheckpointConfig(num_to_keep=2),
                                 failure_config=FailureConfig(max_failures=1))).fit()
    finally:
        ray.shutdown()
    for seen in sorted((Path(here) / "seen").iterdir()):
        print(seen.read_text(), end="", flush=True)
