"""DurableCheckpoints: async saves and resume for a plain torch DDP training loop, with torch.distributed.checkpoint
(dcp.async_save): training goes on while a checkpoint is written, and no rank ever resumes from one that was not
whole. Copy this file into your project: it imports only torch and the standard library.

What it does
  save(epoch, state), on every rank after each epoch: first the previous save's completion step (its Future's
  result, then a barrier on the save's group, then rank 0 renames its folder into place, names it in `latest` and
  deletes the older ones), then this one dispatched with dcp.async_save into a fresh folder, .epoch<k>.incoming/,
  on a gloo group of its own. One save is in flight at a time, and nothing names or deletes a checkpoint before
  every rank's part of the next one is durable.
  resume(), on every rank at the start of every attempt: rank 0 reads `latest`, which only ever names a checkpoint
  whose every part was durable, and sends the name to every rank; each rank reads it with dcp.load. None: start
  fresh. .metadata is unpickled with only the classes dcp writes there (torch's own reader runs whatever it names).
  close(), on every rank when training ends: the last save's completion step, so the process does not exit with
  it pending.

Use
    checkpoints = DurableCheckpoints(folder, keep_last=2)
    state = checkpoints.resume()      # {"model": state_dict, "epoch": int, "step": int}, or None
    ...                               # load state["model"] into your model, start at state["epoch"] + 1
    for epoch in range(start, epochs):
        train_one_epoch()
        checkpoints.save(epoch, {"model": model.module.state_dict(), "epoch": epoch, "step": step})
    checkpoints.close()
Every call is a collective: call it on every rank at the same point. The model's state must be tensors.
"""
import os
import pickle
import re
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import StorageMeta, TensorStorageMetadata

POINTER = "latest"
METADATA = "torch.distributed.checkpoint.metadata"  # the module of the classes dcp pickles in .metadata
ALLOWED = {("pathlib", "PosixPath"), ("torch", "Size"), ("torch.serialization", "_get_layout"),
           ("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("collections", "OrderedDict")}
DTYPES = {"float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"}


class MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in ALLOWED or (module == "torch" and name in DTYPES):
            return super().find_class(module, name)
        if module == METADATA:  # a class it defines, not one it imported
            found = super().find_class(module, name)
            if isinstance(found, type) and found.__module__ == module:
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not something dcp writes in .metadata")


class SafeReader(FileSystemReader):
    """dcp's FileSystemReader, with .metadata read by MetadataUnpickler."""

    def read_metadata(self, *args, **kwargs):
        with open(Path(self.path) / ".metadata", "rb") as f:
            metadata = MetadataUnpickler(f).load()
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class DurableCheckpoints:
    def __init__(self, folder, keep_last: int = 0):
        self.folder, self.keep_last = Path(folder), keep_last  # keep_last: how many to keep, 0: all
        self.group = None  # the save's own gloo group, made at the first call (a collective)
        self.pending = None  # (Future, incoming folder, its final name): the save in flight

    # --- the calls ---
    def save(self, epoch: int, state: dict):
        self.complete()
        final = self.folder / f"epoch{epoch}"
        incoming = final.with_name(f".{final.name}.incoming")
        if dist.get_rank() == 0:
            shutil.rmtree(incoming, ignore_errors=True)  # what a crashed attempt left there
        dist.barrier(group=self.save_group())
        payload = {"model": state["model"], "epoch": torch.tensor(state["epoch"]), "step": torch.tensor(state["step"])}
        future = dcp.async_save(payload, checkpoint_id=str(incoming), process_group=self.group)
        self.pending = (future, incoming, final)

    def resume(self):
        name = [self.read_pointer() if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(name, src=0, group=self.save_group())
        if name[0] is None:
            return None
        path = self.folder / name[0]
        shapes = SafeReader(path).read_metadata().state_dict_metadata
        model = {key[len("model."):]: torch.empty(meta.size, dtype=meta.properties.dtype)
                 for key, meta in shapes.items() if key.startswith("model.") and isinstance(meta, TensorStorageMetadata)}
        state = {"model": model, "epoch": torch.tensor(0), "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=str(path), storage_reader=SafeReader(path), process_group=self.group)
        return {"model": state["model"], "epoch": int(state["epoch"]), "step": int(state["step"])}

    def close(self):
        self.complete()

    # --- the completion step: the previous save is durable on every rank, then rank 0 publishes it ---
    def complete(self):
        if self.pending is None:
            return
        (future, incoming, final), self.pending = self.pending, None
        future.result()  # this rank's part is durable (or its error is raised here)
        dist.barrier(group=self.group)  # and every rank's
        if dist.get_rank() == 0:
            self.rename_into_place(incoming, final)
            self.write_pointer(final.name)
            self.delete_older(final)

    def rename_into_place(self, incoming: Path, final: Path):
        shutil.rmtree(final, ignore_errors=True)  # a crashed attempt's save of this epoch, never named in `latest`
        os.replace(incoming, final)
        self.fsync_folder()

    def write_pointer(self, name: str):
        tmp = self.folder / f".{POINTER}.tmp"
        with open(tmp, "w") as f:
            f.write(name)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.folder / POINTER)
        self.fsync_folder()

    def read_pointer(self):
        pointer = self.folder / POINTER
        return pointer.read_text().strip() if pointer.exists() else None

    def delete_older(self, newest: Path):
        if not self.keep_last:
            return
        found = [(int(m.group(1)), p) for p in self.folder.iterdir() if (m := re.match(r"^epoch(\d+)$", p.name))]
        older = [p for n, p in sorted(found) if n < int(newest.name[len("epoch"):])]
        for path in older[:max(0, len(older) - (self.keep_last - 1))]:
            shutil.rmtree(path)

    # --- small helpers ---
    def save_group(self):
        if self.group is None:
            self.group = dist.new_group(backend="gloo")
        return self.group

    def fsync_folder(self):
        fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
