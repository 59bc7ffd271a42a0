"""fix=own where a scenario saves async (checkpoint.async_save): a class of yours that saves with
torch.distributed.checkpoint's async_save and resumes with its load, as docs/fixes/torch_loop-durable.md's file does.
Your class cooperates with nothing; what it does through dcp is observed, and the scenario's async faults
(train/faults.py's async points) are placed there, as in the loop's own async saves (async_save.py):

  dcp.async_save   its storage writer (dcp's FileSystemWriter for a path, or the one you pass) is observed by the
                   loop's ShardObserver: each rank's shard digest (shard_write), the faults before and after a
                   rank's shard, .metadata written (save_commit). Rank 0 records save_dispatch, and save_end once
                   the Future resolved (the save is durable), or async_save_error. The Future your code gets back
                   tells the faults when your code waits for it (result() or exception()).
  dcp.load         its storage reader (FileSystemReader, or yours) keeps the digest of each shard read
                   (shard_read), and the folder it read is this resume's checkpoint.
  your save()      once it returns, the loop's point "dispatched, and what it does right after" (in_flight's kill).

Both are wrapped as attributes of torch.distributed.checkpoint (public functions), for the rank's life, before your
module is imported: code that calls `dcp.async_save(...)` or `from torch.distributed.checkpoint import async_save`
gets them. A save that does not go through dcp is not faulted here. A hang of two saves on one group is named at
timeout.collective_s (the loop's own watcher knows its saver's stages; it does not know yours).
"""
import time

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

from train.frameworks.torch_loop.async_save import ShardDigests, ShardObserver, record_if_failed

_OBSERVED: dict = {}  # (mixin, class) -> the observed subclass


def observed(instance, mixin):
    """`instance` made an instance of a subclass of its class with `mixin`'s methods first (through super())."""
    cls = type(instance)
    if not isinstance(instance, mixin):
        key = (mixin, cls)
        if key not in _OBSERVED:
            _OBSERVED[key] = type(f"Observed{cls.__name__}", (mixin, cls), {})
        instance.__class__ = _OBSERVED[key]
    return instance


class ObservedDcp:
    """dcp.async_save and dcp.load, observed for the class of yours the loop runs (OwnCheckpoints)."""

    def __init__(self, events, faults):
        self.events, self.faults = events, faults
        self.stage = None  # ShardObserver publishes the save thread's stage here (no watcher reads it)
        self.saving = (-1, 0, "")  # (epoch, step, digest) of the save your code is in, set by the loop
        self.dispatched = None  # the folder of the last save dispatched in it
        self.loaded = None  # the folder the last dcp.load read
        self.digests = {}  # shard -> digest of the last dcp.load
        self.real_save, self.real_load = dcp.async_save, dcp.load
        for module in (dcp, dcp.state_dict_saver, dcp.state_dict_loader):
            if module is not dcp.state_dict_loader:
                module.async_save = self.async_save
            if module is not dcp.state_dict_saver:
                module.load = self.load

    def async_save(self, state_dict, *, checkpoint_id=None, storage_writer=None, **options):
        epoch, step, digest = self.saving
        if storage_writer is None and checkpoint_id is not None:
            storage_writer = FileSystemWriter(checkpoint_id)  # what dcp picks for a path, made here to observe it
        path = str(checkpoint_id if checkpoint_id is not None else getattr(storage_writer, "path", ""))
        if storage_writer is not None:
            observed(storage_writer, ShardObserver)
            storage_writer.saver, storage_writer.epoch, storage_writer.step = self, epoch, step
        if dist.get_rank() == 0:
            self.events.record("save_dispatch", epoch=epoch, step=step, path=path, commits=True)
        future = self.real_save(state_dict, checkpoint_id=checkpoint_id, storage_writer=storage_writer, **options)
        self.dispatched, dispatched_t = path, time.time()
        future.add_done_callback(lambda f: self.ended(f, epoch, step, path, digest, dispatched_t))
        if hasattr(future, "result"):
            future.race_lab_awaited = lambda: self.faults.async_awaited(epoch)
            observed(future, Awaited)
        return future

    def ended(self, future, epoch: int, step: int, path: str, digest: str, dispatched_t: float):
        """The Future's callback, in the save's thread: durable (rank 0 records save_end) or failed."""
        if not record_if_failed(self.events, future, epoch, step) and dist.is_initialized() and dist.get_rank() == 0:
            self.events.record("save_end", epoch=epoch, step=step, path=path, digest=digest,
                               dispatched_t=dispatched_t, durable_t=time.time())

    def load(self, state_dict, *, checkpoint_id=None, storage_reader=None, **options):
        if storage_reader is None and checkpoint_id is not None:
            storage_reader = FileSystemReader(checkpoint_id)  # what dcp picks for a path
        if storage_reader is not None:
            observed(storage_reader, ShardDigests)
        done = self.real_load(state_dict, checkpoint_id=checkpoint_id, storage_reader=storage_reader, **options)
        self.loaded = str(checkpoint_id if checkpoint_id is not None else getattr(storage_reader, "path", ""))
        self.digests = dict(getattr(storage_reader, "digests", {}))
        return done


class Awaited:
    """Mixed into the Future dcp.async_save returned: the faults hear when your code waits for it."""

    def result(self, *args, **kwargs):
        self.race_lab_awaited()
        return super().result(*args, **kwargs)

    def exception(self, *args, **kwargs):
        self.race_lab_awaited()
        return super().exception(*args, **kwargs)
