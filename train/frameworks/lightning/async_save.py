"""Lightning's own async saves (checkpoint.async_save, workload=resume): Trainer(plugins=[AsyncCheckpointIO(io)]), as
Lightning documents it, around the resume's CheckpointIO (resume.py's ResumeCheckpointIO, or the fix's). Each save is
submitted to AsyncCheckpointIO's single-worker thread and returns at once; the wrapped CheckpointIO writes it there.

What Lightning does, as shipped (pytorch_lightning 2.6.6): ModelCheckpoint(save_top_k=1) saves the new best
(_update_best_and_save: Trainer.save_checkpoint, which now only submits the write) and then removes the old one
through strategy.remove_checkpoint, which AsyncCheckpointIO hands to the wrapped CheckpointIO at once
(plugins/io/wrapper.py): nothing orders the removal after the write it makes room for (Lightning#14035). With
save_last="link" (checkpoint.pointer) last.ckpt is then linked to the file not yet written. A kill while that write is
in flight leaves no checkpoint: the old one removed, the new one never written, last.ckpt naming nothing.

Seams, all public (nothing of Lightning's is patched):
  ObservedAsyncCheckpointIO  AsyncCheckpointIO, its save_checkpoint recording save_dispatch (rank 0, the main
                             thread) before the shipped one submits the write
  AsyncWrites                over the wrapped CheckpointIO, in AsyncCheckpointIO's thread: faults.async_write before
                             the write (slow_write: a slow disk), and save_end's dispatched_t and durable_t
The fix (fix=on_durable): RemoveWhenDurable, whose remove_checkpoint first waits for every write submitted before it
(AsyncCheckpointIO.teardown, public: it waits for its thread's writes and raises a failed one's error; the next save
starts the thread again), through train/fixes.remove_when_durable.
"""
import time

from pytorch_lightning.plugins import AsyncCheckpointIO

from train.fixes import remove_when_durable


class AsyncWrites:
    """Over a CheckpointIO of resume.py's (it has events, faults, save_fields): runs in AsyncCheckpointIO's thread."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.faults.async_write(checkpoint["epoch"])
        super().save_checkpoint(checkpoint, path, storage_options)

    def save_fields(self, path) -> dict:
        """When this save was dispatched (ObservedAsyncCheckpointIO) and when its write returned: durable."""
        return {"dispatched_t": self.dispatched.pop(str(path), None), "durable_t": time.time()}


class ObservedAsyncCheckpointIO(AsyncCheckpointIO):
    """Lightning's AsyncCheckpointIO as shipped; each save's dispatch is recorded (global rank 0 saves)."""

    def __init__(self, checkpoint_io, events):
        super().__init__(checkpoint_io)
        self.events = events

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.checkpoint_io.dispatched[str(path)] = time.time()
        self.events.record("save_dispatch", epoch=checkpoint["epoch"], step=checkpoint["global_step"], path=str(path))
        super().save_checkpoint(checkpoint, path, storage_options)


class RemoveWhenDurable(ObservedAsyncCheckpointIO):
    """fix=on_durable: the old checkpoint is removed only once every write submitted before is durable."""

    def remove_checkpoint(self, path):
        remove_when_durable(self.events, self.teardown,
                            lambda: super(RemoveWhenDurable, self).remove_checkpoint(path))


# fix.name -> the AsyncCheckpointIO it runs with, where it is an async save's fix (else ObservedAsyncCheckpointIO)
ASYNC_FIXES = {"on_durable": RemoveWhenDurable}


def async_io(io_class, rank, resume) -> AsyncCheckpointIO:
    """AsyncCheckpointIO (the fix's) around io_class(rank, resume), which writes in its thread."""
    inner = type(f"Async{io_class.__name__}", (AsyncWrites, io_class), {})(rank, resume)
    inner.dispatched = {}  # path -> when its save was dispatched
    return ASYNC_FIXES.get(rank.cfg["fix"]["name"], ObservedAsyncCheckpointIO)(inner, rank.events)
