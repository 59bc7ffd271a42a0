"""The resume loop's async saves (checkpoint.async_save): torch.distributed.checkpoint's async_save, training going
on while a background thread writes. Each rank writes its own shard (dcp's __<rank>_0.distcp); .metadata, written
last by rank 0, commits the checkpoint.

The loop as it is commonly written (fix=in_place; torchtitan's and KempnerForge's shape): each save waits for the
previous one's Future (as torch documents: `.result()`), dispatches the next on a gloo group of its own, then at
once names it in `latest` and deletes the old ones (checkpoint.keep_last), and ends with the loop's barrier; at the
end of the run it waits for the last one. The fixes (fix.name), each one difference, each from train/fixes.py:
  on_durable    the pointer and the cleanup only in the completion step: after the Future and a barrier
                (fixes.complete_when_durable; KempnerForge PR#103)
  own_group     the save's collectives on a group of its own even where the scenario put them on the training's
                (fixes.group_of_its_own; KempnerForge#104, torchtitan PR#313)
  fresh_rename  a save over the checkpoint folder goes to a fresh folder, renamed into place once durable
                (fixes.fresh_folder, rename_into_place; Orbax's design, VeOmni PR#1164's review)
  durable       all three at once, the one fix that holds every async scenario (race-lab check check.saves=async):
                a group of its own, the completion step, and a fresh folder where a save goes over one
The faults (fault.async_fault, train/faults.py's async points) and the shard records train/judge/shards.py reads:
  save_dispatch{epoch, step, path}   save_end{..., dispatched_t, durable_t}: durable_t is when its Future resolved
  shard_write{step, shard, digest} (each rank, once its write returned)   shard_read{step, shard, digest, path}
Two scenario switches, each one difference from the loop as shipped: exit_pending, the loop does not wait for its
last save at the end (end); overlap, it does not wait for the previous save before the next (save). on_durable's
completion step still waits in both: it is their fix. The saver also records save_commit (rank 0, .metadata written)
and async_save_error (a Future that raised, awaited or not).
A shared group's hang, and two saves' in flight at once (overlap), is named by the watcher below, not at
timeout.collective_s (docs/async.md says how).
"""
import hashlib
import json
import os
import shutil
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter, StorageReader, StorageWriter

from train.fixes import (CheckpointFailed, SyncFailed, complete_when_durable, fresh_folder,
                         group_of_its_own, rename_into_place, safe_dcp_reader, watched)
from train.toolkit import hang
from train.toolkit.rank import say

ASYNC_FIX_NAMES = ("on_durable", "own_group", "fresh_rename", "durable")
ONE_FOLDER = "last"  # fault.async_fault=overwrite: every save goes here, over the last
STALL_S = 3.0  # shared group: both threads of every rank without progress this long is named a hang
POLL_S = 0.2
PEERS_S = 5.0  # how long a hung rank waits for its peers to record theirs before it leaves


def tensors_digest(named: dict) -> str:
    """sha256 over the names and bytes of the tensors in `named` (name -> tensor), in name order."""
    h = hashlib.sha256()
    for name in sorted(named):
        h.update(name.encode())
        h.update(named[name].detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


class ShardObserver(StorageWriter):
    """Mixed into a dcp writer (first, over its class), through its public StorageWriter methods: each rank records the digest of the shard
    it wrote, the save thread's stage is published for the hang watcher, and the scenario's faults sit in the write.
    It reads `saver` (its events, faults and stage), `epoch` and `step`, set on the writer."""

    saver, epoch, step = None, -1, 0

    def prepare_local_plan(self, plan):
        self.saver.stage = "plan"  # its next step is the plan's gather and scatter on the save's group
        return super().prepare_local_plan(plan)

    def write_data(self, plan, planner):
        faults, me = self.saver.faults, dist.get_rank()
        faults.async_before_shard(self.epoch, me)
        tensors = {item.index.fqn: planner.resolve_data(item) for item in plan.items}
        written = super().write_data(plan, planner)
        self.saver.events.record("shard_write", step=self.step, shard=me,
                                 digest=tensors_digest({k: v for k, v in tensors.items() if torch.is_tensor(v)}))
        faults.async_after_shard(self.epoch, me)
        self.saver.stage = "commit"  # its next step is the write's gather, .metadata, a broadcast
        return written

    def finish(self, metadata, results):
        """Rank 0 (dcp's coordinator) writes .metadata, the commit point: save_commit says it is on disk, whether
        or not the loop ever waits for the Future (the judge reads it: a dispatched save never committed)."""
        done = super().finish(metadata, results)
        self.saver.events.record("save_commit", epoch=self.epoch, step=self.step, path=str(self.path))
        return done


class ShardWriter(ShardObserver, FileSystemWriter):
    """dcp's own writer, observed (ShardObserver): the loop's async saves."""

    def __init__(self, path, saver, epoch: int, step: int):
        super().__init__(str(path))
        self.saver, self.epoch, self.step = saver, epoch, step


def outdated(folders: list, published: Path, keep: int) -> list:
    """The epoch<k> folders that the cleanup deletes once `published` is: all but the newest `keep` of those up to
    `published`. A newer one is a save already dispatched (dcp makes its folder then), not yet durable."""
    epoch = lambda p: int(Path(p).name[len("epoch"):])  # noqa: E731
    upto = sorted({Path(p) for p in folders if epoch(p) <= epoch(published)} | {Path(published)}, key=epoch)
    return upto[:-keep]


class ShardDigests(StorageReader):
    """Mixed into a dcp FileSystemReader (first, over its class): keeps, per shard file, the digest of the tensors read from it (digests)."""

    digests: dict = {}

    def read_data(self, plan, planner):
        done = super().read_data(plan, planner)
        by_file = {}
        for item in plan.items:
            shard = int(self.storage_data[item.storage_index].relative_path.split("_")[2])  # __<rank>_<n>.distcp
            by_file.setdefault(shard, {})[item.dest_index.fqn] = planner.resolve_tensor(item)
        self.digests = {shard: tensors_digest(named) for shard, named in by_file.items()}
        return done


def shard_reader(path):
    """safe_dcp_reader for `path`, which also keeps, per shard file, the digest of the tensors read from it."""

    class ShardReader(ShardDigests, type(safe_dcp_reader(path))):
        pass

    return ShardReader(path)


class AsyncSaver:
    def __init__(self, loop):
        cfg = loop.cfg
        self.loop, self.events, self.faults = loop, loop.events, loop.faults
        self.fix, self.fault = cfg["fix"]["name"], cfg["fault"]["async_fault"]
        self.one_folder = self.fault == "overwrite"
        self.pending, self.stage, self.ticks = None, None, 0  # the save in flight; its thread's stage; progress
        # what the fix changes: publish in a completion step; a group of its own; a fresh folder, renamed into place
        self.on_durable = self.fix in ("on_durable", "fresh_rename", "durable")
        self.fresh = self.fix == "fresh_rename" or (self.fix == "durable" and self.one_folder)
        self.own_group = self.fix in ("own_group", "durable")
        shared = self.fault == "shared_group" and not self.own_group
        # fault.async_fault=overlap: the naive loop dispatches each save without waiting for the one before
        self.overlap = self.fault == "overlap" and not self.on_durable
        self.earlier = []  # with overlap: the saves dispatched before the pending one, not waited for
        self.waiting = None  # the save whose Future the loop waits for now
        self.group = None if shared else group_of_its_own()  # None: the training's (default) group
        watched_saves = shared or self.overlap  # two threads' collectives on one group: a hang the watcher names
        self.watcher = threading.Thread(target=self.watch, name="async-save-watch",
                                        daemon=True) if watched_saves else None
        if self.watcher:
            self.watcher.start()

    # --- where checkpoints are ---
    def path_of(self, epoch: int) -> Path:
        return self.loop.folder / (ONE_FOLDER if self.one_folder else f"epoch{epoch}")

    def listed(self, dcp_listing: list) -> list:
        """The checkpoints a resume may read: with one folder, it (or, mid-rename, its .old); else dcp's listing."""
        if not self.one_folder:
            return dcp_listing
        last = self.loop.folder / ONE_FOLDER
        old = last.with_name(ONE_FOLDER + ".old")
        return [p for p in (old, last) if p.is_dir()]

    # --- the load, with its shard records ---
    def load(self, state: dict, path: Path):
        reader = shard_reader(path)
        _dcp_load_with(state, path, reader)
        step = int(state["step"])
        for shard, digest in sorted(getattr(reader, "digests", {}).items()):
            self.events.record("shard_read", step=step, shard=shard, digest=digest, path=str(path))

    # --- the save ---
    def save(self, epoch: int, step: int, weights: dict):
        """Wait for the previous save (and complete it), dispatch this one; the naive loop names and cleans at once."""
        loop, path = self.loop, self.path_of(epoch)
        if self.overlap and self.pending is not None:  # the naive loop: the previous save goes on in flight
            self.earlier.append(self.pending)
            self.pending = None
        self.wait()
        target = path
        if self.fresh:
            target = fresh_folder(path)
            if dist.get_rank() == 0:
                shutil.rmtree(target, ignore_errors=True)  # what a crashed attempt left there
            if not watched(self.events, "barrier", lambda: dist.barrier(group=self.group)):
                raise SyncFailed
        state = {"model": weights, "epoch": torch.tensor(epoch), "step": torch.tensor(step)}
        if dist.get_rank() == 0:
            self.events.record("save_dispatch", epoch=epoch, step=step, path=str(path), commits=True)
        self.stage = "staging"
        future = dcp.async_save(state, checkpoint_id=str(target), storage_writer=ShardWriter(target, self, epoch, step),
                                process_group=self.group)
        durable = {}
        future.add_done_callback(lambda f: durable.setdefault("t", time.time()))
        future.add_done_callback(lambda f: self.failed(f, epoch, step))
        self.pending = {"future": future, "epoch": epoch, "step": step, "path": path, "target": target,
                        "digest": loop.digest_of(weights), "dispatched_t": time.time(), "durable": durable}
        if not self.on_durable:  # the naive loop: named and cleaned at once
            self.publish(path)
        self.faults.async_dispatched(epoch, path)

    def failed(self, future, epoch: int, step: int):
        """The Future's callback, in the save's thread: a save that raised is recorded (async_save_error) even when
        the loop never asks for its result (a process that ends with it pending: its error goes with the Future)."""
        record_if_failed(self.events, future, epoch, step)

    def publish(self, path: Path):
        """The pointer names `path` and the checkpoints older than the newest checkpoint.keep_last up to it go (rank
        0, as the loop's own steps). A newer folder is a save a peer has already begun (dcp makes its folder at
        dispatch): never counted, or it would push out the one just made durable."""
        loop = self.loop
        if dist.get_rank() == 0 and loop.use_pointer:
            loop.write_pointer(path)
        if loop.keep and not self.one_folder and dist.get_rank() == 0:
            for old in outdated(loop.checkpoints(), path, loop.keep):
                loop.delete(old)

    def wait(self):
        """Wait for the save in flight (its Future's result, as torch documents); record when it was durable; with
        on_durable or fresh_rename, its completion step: a barrier, then rank 0 publishes (renames into place)."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        self.waiting = pending  # still in flight for the watcher, until its Future resolved
        self.faults.async_awaited(pending["epoch"])
        try:
            if self.on_durable:
                def commit():
                    if self.fresh:
                        rename_into_place(pending["target"], pending["path"])
                    self.publish(pending["path"])
                complete_when_durable(self.events, pending["future"], self.group, commit)
            else:
                pending["future"].result()
        except CheckpointFailed as e:
            self.events.record("train_error", epoch=pending["epoch"], error_type="CheckpointException",
                               message=str(e), timed_out=False)
            raise
        self.stage = self.waiting = None
        if dist.get_rank() == 0:
            self.events.record("save_end", epoch=pending["epoch"], step=pending["step"], path=str(pending["path"]),
                               digest=pending["digest"], dispatched_t=pending["dispatched_t"],
                               durable_t=pending["durable"].get("t"))

    def end(self):
        """The end of the run: wait for the last save. fault.async_fault=exit_pending is the loop that does not (it
        dispatches its last save and the process ends); on_durable's completion step (and fresh_rename's) still runs
        here: fixes.complete_when_durable waits for the pending save before the process exits."""
        if self.fault == "exit_pending" and not self.on_durable:
            if self.pending is not None:
                say("The run ends with its last async save still pending (fault.async_fault=exit_pending).")
            return
        saves, self.earlier = self.earlier + [self.pending], []  # overlap: those in flight before the last first
        for self.pending in saves:
            self.wait()

    def tick(self):
        self.ticks += 1

    # --- a shared group's hang, named once certain enough (docs/async.md) ---
    def watch(self):
        """While a save is in flight on the training's group: publish this rank's progress; once every rank's
        main thread and save thread have both stood still STALL_S with the save in flight, record the hang and
        end the rank (gloo's C++ wait cannot be interrupted), as train/toolkit/hang.py does."""
        me, world = dist.get_rank(), dist.get_world_size()
        try:
            store = hang.store().clone()
        except (RuntimeError, dist.DistError, AttributeError):
            return
        last, since = None, time.monotonic()
        while True:
            time.sleep(POLL_S)
            flying = self.pending is not None or self.waiting is not None or bool(self.earlier)
            now = (self.ticks, self.stage, flying)
            if now != last:
                last, since = now, time.monotonic()
            still = time.monotonic() - since if flying and self.stage else 0.0
            try:
                store.set(f"race-lab/async/{me}", json.dumps({"still_s": still, "stage": self.stage, "t": time.time()}))
                peers = {r: json.loads(store.get(f"race-lab/async/{r}")) for r in range(world)
                         if r != me and store.check([f"race-lab/async/{r}"])}
            except (RuntimeError, dist.DistError):
                return
            if still >= STALL_S and len(peers) == world - 1 and all(p["still_s"] >= STALL_S for p in peers.values()):
                how, sync = ("had two async saves' collectives in flight on the save's group", "two saves' "
                             "collectives on one process group") if self.overlap else \
                    ("had its async save's collectives and its training's waiting on the same group",
                     "collectives on the training's process group")
                self.events.record("hang", sync=sync, n=0,
                                   waiting_for=sorted(peers), peers={str(r): {"at": "paired", "how": how,
                                                                               "stage": p["stage"]}
                                                                     for r, p in sorted(peers.items())},
                                   certain_at=time.time())
                say("Collectives of two threads wait on one process group and neither moves: "
                    "ending this rank now, not at timeout.collective_s.")
                try:  # every rank records its hang before any leaves (a rank that leaves breaks its peers' waits)
                    if store.add("race-lab/async/hung", 1) == world:
                        store.set("race-lab/async/all-hung", "1")
                    store.wait(["race-lab/async/all-hung"], timedelta(seconds=PEERS_S))
                except (RuntimeError, dist.DistError):
                    pass
                os._exit(hang.EXIT_HUNG)


def record_if_failed(events, future, epoch: int, step: int) -> bool:
    """An async save's Future that raised is recorded as async_save_error; True if it did."""
    e = future.exception()
    if e is not None:
        events.record("async_save_error", epoch=epoch, step=step, error_type=type(e).__name__,
                      message=str(e).strip().splitlines()[0][:300] if str(e).strip() else "")
    return e is not None


def _dcp_load_with(state: dict, path, reader):
    """dcp.load into `state` through `reader` (safe_dcp_reader's: .metadata runs no foreign code)."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        dcp.load(state, checkpoint_id=str(path), storage_reader=reader)
    except CheckpointException as e:
        raise CheckpointFailed(e) from None
