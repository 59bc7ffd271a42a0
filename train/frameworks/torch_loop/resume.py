"""plain torch: a training loop that resumes after a crash, as real ones do (issue 15). No framework: DDP over the
small_cnn and digits_split every adapter shares, SGD without momentum (so a checkpoint is the model and its step:
no optimizer state to keep), a checkpoint every epoch on rank 0, and at the start of every attempt a resume from
the newest checkpoint it finds. torch elastic restarts the whole worker group when a rank dies
(launch.max_restarts): every attempt runs this module from the top, with TORCHELASTIC_RESTART_COUNT set.

It is a workload of its own, not a mode of a save-best adapter: those keep the best and load it once at the end,
this one saves every epoch and reads at the start; what it shares with them is in train/toolkit/.

Each epoch: train (DDP's all-reduce), rank 0 saves epoch<k>.pt (torch.save bytes, through faults.resume_write),
a barrier (as Lightning's and the Trainer's saves end), then with checkpoint.keep_last the rotation. The newest
checkpoint is found by listing the folder (epoch numbers), or with checkpoint.pointer through `latest`.
The fixes (fix.name), each one difference from the naive loop, each from train/fixes.py:
  in_place       the naive loop: write the file in place, trust the newest name (or the pointer, written first)
  atomic         write a temporary name, fsync, rename (fixes.atomic_write); trust the newest name
  dcp            torch.distributed.checkpoint, folders epoch<k>/ (fixes.dcp_save/dcp_load); trust the newest folder
                 that has .metadata, dcp's commit point (torchtitan#315)
  manifest       a marker epoch<k>.pt.complete with the file's sha256, written last (fixes.write_marker), and the
                 pointer after it; resume from the newest complete checkpoint (fixes.is_complete)
  agreed         rank 0 picks the checkpoint, every rank takes it (fixes.rank0_decides)
  rank0_rotates  the rotation by rank 0 alone, after a barrier (fixes.rotate_on_rank0)
  rank0_leads    all of it in the helper users copy (rank0_leads.py; observed.py observes it): rank 0 writes whole
                 files and a marker last, picks and reads the newest complete one and broadcasts it, rotates alone
  own            a class of yours (fix._target_) saves, rotates and resumes; own.py places the faults at what it does
The model is wrapped in DDP before the resume and the checkpoint is read into its module, as Accelerate's
load_state after prepare: read before wrapping, DDP's constructor would copy rank 0's weights to every rank and
hide a rank that read another file (not its step, which the loop keeps on its own).

Events (train/judge/'s resume rules read them; every one carries `attempt`, train/events.py):
  loop_start{keep_last, pointer}   resume{epoch, step, path, digest, listing}   (path null: a fresh start)
  load_attempt{path, bytes}  load_error{path, error_type, message}  (the resume's read)
  save_start{epoch, step, path}  save_end{epoch, step, path, digest, bytes}  crash{at, epoch, path}
  rotate{path}  rotate_error{path, error_type, message}  train_error{epoch, error_type, message, timed_out}
  train_end  final{digest}
"""
import io
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.checkpoint import FileSystemWriter
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from train.fixes import (SyncFailed, atomic_write, dcp_load, dcp_save, is_complete, rank0_decides, remove_checkpoint,
                         rotate_on_rank0, watched, write_marker)
from train.frameworks.torch_loop.async_save import ASYNC_FIX_NAMES, AsyncSaver
from train.frameworks.torch_loop.observed import ObservedRank0Checkpoints
from train.frameworks.torch_loop.own import OwnCheckpoints
from train.toolkit.rank import Rank, checkpoint_dir, say
from train.toolkit.resume import start_attempt, write_in_place
from train.toolkit.model import digits_split, small_cnn
from train.toolkit.errors import error_fields
from train.toolkit.model import weights_digest


@dataclass(frozen=True)
class Way:
    """How the loop does one fix: each field one difference from the naive loop (fix=in_place)."""
    write: object = write_in_place  # how rank 0 writes epoch<k>.pt: write(path, fill)
    dcp: bool = False  # torch.distributed.checkpoint: folders epoch<k>/, every rank writes, .metadata commits
    marker: bool = False  # a marker written last (the pointer after it, atomically); the newest complete one read
    rank0_picks: bool = False  # rank 0 picks the checkpoint, every rank takes it
    rank0_rotates: bool = False  # the rotation by rank 0 alone, after a barrier
    leads: bool = False  # the helper users copy saves, rotates and resumes (rank0_leads.py, observed)
    own: bool = False  # a class of yours saves and resumes (fix=own, fix._target_; own.py places the faults)


# the dispatch: fix.name -> how the loop does it (framework.py names these fixes, and why it lacks others)
BY_FIX = {
    "in_place": Way(),
    "atomic": Way(write=atomic_write),
    "dcp": Way(dcp=True),
    "manifest": Way(marker=True),
    "agreed": Way(rank0_picks=True),
    "rank0_rotates": Way(rank0_rotates=True),
    "rank0_leads": Way(leads=True),
    "own": Way(own=True),
}
# the async save's fixes: only where a scenario saves async (their configs' needs: [async_save]); async_save.py
# does them, from train/fixes.py
ASYNC_FIXES = {name: Way(dcp=True) for name in ASYNC_FIX_NAMES}
POINTER = "latest"  # DeepSpeed's name for it


def fit_and_resume(rank: Rank):
    ResumeLoop(rank).run()


class KillAtCommit(FileSystemWriter):
    """dcp's own writer, with fault.kill_epoch's kill placed where the coordinator is about to write .metadata
    (finish, a public StorageWriter method): every data file is written, the commit point is not."""

    def __init__(self, path, faults, epoch: int):
        super().__init__(str(path))
        self.faults, self.epoch = faults, epoch  # the run's fault points; the epoch being saved

    def finish(self, metadata, results):
        self.faults.kill_point("mid_write", self.epoch, Path(self.path) / ".metadata")
        return super().finish(metadata, results)


class ResumeLoop:
    def __init__(self, rank: Rank):
        cfg = rank.cfg
        self.cfg, self.events, self.faults = cfg, rank.events, rank.faults
        self.rank, self.way = rank, BY_FIX.get(cfg["fix"]["name"]) or ASYNC_FIXES[cfg["fix"]["name"]]
        self.folder = Path(checkpoint_dir(cfg))  # epoch<k>.pt (or epoch<k>/ with dcp), and `latest`
        self.keep = cfg["checkpoint"]["keep_last"]  # 0: keep all
        self.use_pointer = cfg["checkpoint"]["pointer"]  # find the newest through `latest`
        self.timeout_s = cfg["timeout"]["collective_s"]  # a wait that is not a collective
        self.me = dist.get_rank()
        self.leads = ObservedRank0Checkpoints(self.folder, self.keep, self.use_pointer, self.events,
                                              self.faults) if self.way.leads else None
        self.own = OwnCheckpoints(cfg, self.folder, self.events, self.faults) if self.way.own else None
        self.saver = None  # AsyncSaver with checkpoint.async_save, made once the group exists (run)
        self.dcp = self.way.dcp or cfg["checkpoint"]["async_save"]  # async saves are dcp's

    def run(self):
        cfg, data = self.cfg, self.cfg["data"]
        start_attempt(self.rank, self.folder)
        self.saver = AsyncSaver(self) if cfg["checkpoint"]["async_save"] and not self.own else None
        torch.manual_seed(cfg["seed"])
        x_train, y_train, _, _ = digits_split(data, cfg["seed"])
        train_set = TensorDataset(x_train, y_train)
        sampler = DistributedSampler(train_set, shuffle=True, seed=cfg["seed"])
        loader = DataLoader(train_set, batch_size=data["batch_size"], sampler=sampler)
        self.steps_per_epoch = len(loader)
        self.model = DistributedDataParallel(small_cnn(1))
        optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg["lr"])  # no state: the checkpoint is the model

        start = self.resume()
        self.events.record("fit_start", train_batches=self.steps_per_epoch, node_local=cfg["checkpoint"]["node_local"],
                           start_epoch=start)
        epoch = start
        try:
            for epoch in range(start, cfg["epochs"]):
                sampler.set_epoch(epoch)
                self.model.train()
                for x, y in loader:
                    F.cross_entropy(self.model(x), y).backward()
                    optimizer.step()
                    optimizer.zero_grad()
                    if self.saver:
                        self.saver.tick()
                say(f"epoch {epoch} trained")
                self.save(epoch)
                self.rotate()
            if self.saver:
                self.saver.end()  # the last save, durable before the run ends (async_save.py)
            if self.own:
                self.own.close()  # your class's close(), if it has one
        except SyncFailed:
            raise RuntimeError("a sync failed (recorded)") from None
        except Exception as e:  # recorded, then the rank dies as a real loop would: torch elastic restarts it
            if getattr(e, "race_lab", None) != "rotate_error":
                self.events.record("train_error", epoch=epoch, **error_fields(e))
            raise
        self.events.record("train_end")
        # the weights it ends with: its parameters, which DDP keeps equal on every rank; BatchNorm's statistics are
        # each rank's own last batch's (a sync here would pair with a peer's all-reduce when the ranks disagree)
        self.events.record("final", digest=weights_digest(dict(self.model.module.named_parameters())))

    def sync_buffers(self):
        """Rank 0's buffers to every rank, as DDP does before each forward: after the last step of an epoch each
        rank's BatchNorm statistics are its own batch's (not a divergence; dcp would save a mix of them)."""
        for buffer in self.model.module.buffers():
            dist.broadcast(buffer, src=0)

    def digest(self) -> str:
        return weights_digest(self.model.module.state_dict())

    @staticmethod
    def digest_of(weights: dict) -> str:
        return weights_digest(weights)

    # --- where checkpoints are ---
    def path_of(self, epoch: int) -> Path:
        if self.saver:
            return self.saver.path_of(epoch)
        return self.folder / (f"epoch{epoch}" if self.dcp else f"epoch{epoch}.pt")

    def checkpoints(self) -> list:
        """The checkpoints in the folder, oldest first, by their epoch number (a temporary file is not one)."""
        pattern = re.compile(r"^epoch(\d+)$" if self.dcp else r"^epoch(\d+)\.pt$")
        found = [(int(m.group(1)), p) for p in self.folder.iterdir() if (m := pattern.match(p.name))]
        return [p for _, p in sorted(found)]

    def read_pointer(self):
        pointer = self.folder / POINTER
        return self.folder / pointer.read_text().strip() if pointer.exists() else None

    def write_pointer(self, path: Path):
        """`latest` names `path`: written in place by the naive loop (as DeepSpeed's), atomically by manifest."""
        text = path.name.encode()
        if self.way.marker:
            atomic_write(self.folder / POINTER, lambda f: f.write(text))
        else:
            (self.folder / POINTER).write_bytes(text)

    # --- the resume ---
    def choose(self):
        """The checkpoint this rank resumes from (None: a fresh start), and the names it listed."""
        listed = []

        def newest():
            nonlocal listed
            listed = self.faults.listing(self.checkpoints())
            if self.saver:
                listed = self.saver.listed(listed)
            if self.use_pointer:
                named = self.read_pointer()
                if not self.way.marker or named is None or is_complete(named):
                    return named
            if self.dcp:
                listed = [p for p in listed if (p / ".metadata").exists()]  # dcp's commit point
            if self.way.marker:
                listed = [p for p in listed if is_complete(p)]  # fall back to the newest complete one
            return listed[-1] if listed else None

        if self.way.rank0_picks:
            chosen = rank0_decides(self.events, lambda: str(p) if (p := newest()) else None)
            return (Path(chosen) if chosen else None), [str(p.name) for p in listed]
        return newest(), [str(p.name) for p in listed]

    def resume(self) -> int:
        """Read the checkpoint chosen into the model; the epoch to start from. A failed read is recorded and
        raised: the rank dies, and torch elastic restarts the group (a crash loop if it is read again)."""
        if self.leads:
            return self.resume_led()
        if self.own:
            return self.resume_own()
        path, listed = self.choose()
        if path is None:
            self.events.record("resume", epoch=-1, step=0, path=None, digest=self.digest(), listing=listed)
            return 0
        size = path.stat().st_size if path.is_file() else None
        self.events.record("load_attempt", path=str(path), bytes=size)
        try:
            if self.dcp:
                state = {"model": self.model.module.state_dict(), "epoch": torch.tensor(0), "step": torch.tensor(0)}
                if self.saver:
                    self.saver.load(state, path)  # and each shard's digest (shard_read)
                else:
                    dcp_load(state, path)  # in place; its .metadata runs no foreign code
                epoch, step = int(state["epoch"]), int(state["step"])
            else:
                state = torch.load(path, weights_only=True)
                self.model.module.load_state_dict(state["model"])
                epoch, step = state["epoch"], state["step"]
        except Exception as e:
            self.events.record("load_error", path=str(path), **error_fields(e))
            say(f"Resume from {path.name} failed: {type(e).__name__}: {e}")
            raise
        self.events.record("resume", epoch=epoch, step=step, path=str(path), digest=self.digest(), listing=listed)
        say(f"Resumed from {path.name} (epoch {epoch}, step {step}).")
        return epoch + 1

    def resume_led(self) -> int:
        """fix=rank0_leads: the state rank 0 picked and read (its newest complete checkpoint), on every rank."""
        state, path = self.leads.resume(), self.leads.resumed_from
        if state is None:
            self.events.record("resume", epoch=-1, step=0, path=None, digest=self.digest(), listing=self.leads.listed)
            return 0
        self.model.module.load_state_dict(state["model"])
        epoch, step = state["epoch"], state["step"]
        self.events.record("resume", epoch=epoch, step=step, path=path, digest=self.digest(), listing=self.leads.listed)
        say(f"Resumed from rank 0's {Path(path).name} (epoch {epoch}, step {step}).")
        return epoch + 1

    def resume_own(self) -> int:
        """fix=own: the state your class's resume() returned on this rank (None: a fresh start), and the file this
        rank's code read for it (None: it read none, a peer sent it)."""
        state, path = self.own.resume()
        if state is None:
            self.events.record("resume", epoch=-1, step=0, path=None, digest=self.digest(), listing=[])
            return 0
        self.model.module.load_state_dict(state["model"])
        epoch, step = int(state["epoch"]), int(state["step"])
        self.events.record("resume", epoch=epoch, step=step, path=path, digest=self.digest(), listing=[])
        say(f"Resumed with your class's state (epoch {epoch}, step {step}" + (f", read from {Path(path).name})."
                                                                            if path else ")."))
        return epoch + 1

    # --- the save ---
    def save(self, epoch: int):
        """Rank 0 writes epoch<k> (with dcp every rank writes its part), then a barrier."""
        path, step = self.path_of(epoch), (epoch + 1) * self.steps_per_epoch
        self.sync_buffers()
        weights = self.model.module.state_dict()
        if self.leads:  # rank 0 writes (the marker last), a barrier, rank 0 rotates: the helper's own save
            self.leads.save(epoch, {"model": weights, "epoch": epoch, "step": step})
            return
        if self.own:  # your class's save, every rank, whatever sync it does (own.py)
            self.own.save(epoch, step, weights)
            return
        if self.saver:
            self.saver.save(epoch, step, weights)  # dispatched; durable later (async_save.py)
        elif self.dcp:
            self.save_dcp(path, epoch, step, weights)
        elif self.me == 0:
            self.save_file(path, epoch, step, weights)
        if not watched(self.events, "barrier", dist.barrier):
            raise SyncFailed

    def save_file(self, path: Path, epoch: int, step: int, weights: dict):
        buffer = io.BytesIO()
        torch.save({"model": weights, "epoch": epoch, "step": step}, buffer)
        data, digest = buffer.getvalue(), weights_digest(weights)
        if self.use_pointer and not self.way.marker:
            self.write_pointer(path)  # the pointer first: it names a file not yet written
        self.events.record("save_start", epoch=epoch, step=step, path=str(path))
        self.way.write(path, lambda f: self.faults.resume_write(f, data, epoch, path))
        if self.way.marker:
            write_marker(path, data, digest=digest, step=step)  # the commit point, after the whole file
            if self.use_pointer:
                self.write_pointer(path)  # and the pointer last
        self.events.record("save_end", epoch=epoch, step=step, path=str(path), digest=digest, bytes=len(data))
        self.faults.kill_point("after_save", epoch, path)

    def save_dcp(self, path: Path, epoch: int, step: int, weights: dict):
        if self.me == 0:
            if self.use_pointer:
                self.write_pointer(path)
            self.events.record("save_start", epoch=epoch, step=step, path=str(path))
        state = {"model": weights, "epoch": torch.tensor(epoch), "step": torch.tensor(step)}
        dcp_save(state, path, storage_writer=KillAtCommit(path, self.faults, epoch))
        if self.me == 0:
            self.events.record("save_end", epoch=epoch, step=step, path=str(path), digest=weights_digest(weights),
                               bytes=sum(f.stat().st_size for f in path.iterdir()))
            self.faults.kill_point("after_save", epoch, path)

    # --- the rotation ---
    def rotate(self):
        """checkpoint.keep_last: delete all but the newest. The naive loop: every rank deletes them
        (transformers#20988); rank0_rotates: rank 0 alone, after a barrier."""
        if not self.keep or self.leads or self.own or self.saver:  # the helper, your class, the async saver rotate in their save
            return
        old = self.checkpoints()[:-self.keep]
        if self.way.rank0_rotates:
            rotate_on_rank0(self.events, old, self.delete)
            return
        self.faults.listed(old)
        for path in old:
            self.faults.before_delete(path, self.timeout_s)
            self.delete(path)

    def delete(self, path: Path):
        try:
            remove_checkpoint(path)
        except OSError as e:
            self.events.record("rotate_error", path=str(path), **error_fields(e))
            say(f"Deleting {path.name} failed: {type(e).__name__}: {e}")
            e.race_lab = "rotate_error"  # recorded already: not a train_error too
            raise
        self.events.record("rotate", path=str(path))
