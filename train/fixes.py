"""How ranks sync around a checkpoint, each fix written once as a strategy over save, sync and load.
Framework-free (torch only): fastai's SaveModelCallback subclasses (train/frameworks/fastai/callbacks.py) and every
framework adapter (train/frameworks/) call these at their own seams, so no fix is copied per framework.

  watched        any wait (a barrier, a collective, a file), between sync_enter and sync_exit/sync_error events;
                 a collective no peer can come to any more ends at once (train/toolkit/hang.py)
  atomic_write   write a temporary name in the same folder, fsync it and the folder, then rename (atomic)
  wait_for_file  poll until a path exists, up to a timeout (poll, atomic)
  broadcast_read rank 0 reads, every other rank gets its object through a collective (broadcast)
  agree          rank 0 decides, every rank takes its decision (agreed)
  rank0_decides  the same for any value: rank 0's choice of a checkpoint to resume from (agreed, the resume loop)
  write_marker / is_complete   a completeness marker written last, with a digest of the file (manifest)
  rotate_on_rank0  keep the newest N checkpoints: one rank deletes the others, after a barrier (rank0_rotates)
Sharded checkpoints (every rank writes its own shard, a tag file names the newest: DeepSpeed's `latest`):
  agreed_tag     rank 0 lists the tags, every rank checks its own shards of each, an all-reduce MIN (agreed)
  publish_tag_last  the tag written last: a barrier after every shard, then rank 0 writes it atomically (atomic)
  publish_manifest_last / manifest_tag   the tag, then a manifest naming the run and the tag, written last; a
                 resume takes only the tag of its own run's manifest, not one an older run left (manifest)
Async saves (checkpoint.async_save):
  group_of_its_own       a process group for the save's collectives alone (own_group)
  complete_when_durable  the pointer and the cleanup only after the save's Future and a barrier (on_durable)
  fresh_folder / rename_into_place   a save over a checkpoint goes to a fresh folder, renamed into place (fresh_rename)
  remove_when_durable    a retention's removal only after every write submitted before it is durable (on_durable,
                         Lightning's AsyncCheckpointIO with save_top_k)
"""
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import torch.distributed as dist

from train.toolkit.errors import error_fields
from train.toolkit.hang import watch
from train.toolkit.rank import say


class SyncFailed(Exception):
    """A sync failed; its sync_error event is recorded already."""


class LoadFailedOnRank0(Exception):
    """Rank 0 could not read the checkpoint it was to broadcast; carries its error's type."""

    def __init__(self, error_type, message):
        super().__init__(message)
        self.error_type = error_type


def watched(events, how: str, until) -> bool:
    """Run `until()` (a barrier, a collective, a wait) between sync events; False if it failed (the error
    is recorded and said, not raised) or returned False. While it waits, the rank's place is published, and
    a collective (train/toolkit/hang.py's COLLECTIVES) that a peer can never come to ends the rank at once (a hang
    event, not a wait until timeout.collective_s)."""
    events.record("sync_enter", how=how)
    try:
        with watch(events, how):
            result = until()
    except Exception as e:
        events.record("sync_error", how=how, **error_fields(e))
        say(f"{how} failed: {type(e).__name__}: {e}")
        return False
    events.record("sync_exit", how=how)
    return result is not False


def atomic_write(path, write):
    """Put a file at `path` so that no reader ever sees it half written: `write(f)` fills a temporary file
    in the same folder, which is fsynced and renamed onto `path`, and the folder is fsynced (Lightning#20011,
    Orbax). A failed write leaves no temporary file and whatever `path` held before."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def wait_for_file(path, timeout_s: float) -> bool:
    """True once `path` exists; TimeoutError after timeout_s."""
    path, deadline = Path(path), time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path.name} after {timeout_s} s (timed out)")
        time.sleep(0.05)
    return True


def broadcast_read(events, read):
    """Only rank 0 calls `read()`; every rank returns what it read, sent through broadcast_object_list, so
    no other rank touches the filesystem. Raises SyncFailed (recorded) when the collective fails, and
    LoadFailedOnRank0 on every rank when rank 0's read failed."""
    sent = [None]
    if dist.get_rank() == 0:
        try:
            sent = [{"object": read()}]
        except Exception as e:
            sent = [{"error": error_fields(e)}]
    if not watched(events, "broadcast", lambda: dist.broadcast_object_list(sent, src=0)):
        raise SyncFailed
    if dist.get_rank() != 0:
        events.record("load_attempt", source="broadcast from rank 0")
    if "error" in sent[0]:
        raise LoadFailedOnRank0(sent[0]["error"]["error_type"], sent[0]["error"]["message"])
    return sent[0]["object"]


def agree(events, decide) -> bool:
    """Rank 0 calls `decide()` -> (load: bool, why: str); every rank takes that decision (Lightning's
    reduce_boolean_decision, the fix of transformers#40923), so no rank waits for a peer that went
    another way. False (and a skip event saying why) when rank 0 decided not to load or the sync failed."""
    decision = [None]
    if dist.get_rank() == 0:
        load, why = decide()
        decision = [{"load": load, "why": why}]
    if not watched(events, "agree", lambda: dist.broadcast_object_list(decision, src=0)):
        return False
    if not decision[0]["load"]:
        events.record("skip", reason=f"{decision[0]['why']}: every rank agreed not to load")
        say(f"Not loading: {decision[0]['why']}.")
    return decision[0]["load"]


def rank0_decides(events, decide):
    """Rank 0 calls `decide()` -> any picklable value (the checkpoint to resume from); every rank returns that
    value, sent with broadcast_object_list (watched as agree), so no rank acts on a listing of its own.
    Raises SyncFailed (recorded) when the collective fails."""
    box = [decide() if dist.get_rank() == 0 else None]
    if not watched(events, "agree", lambda: dist.broadcast_object_list(box, src=0)):
        raise SyncFailed
    return box[0]


# --- a completeness marker written last (vllm-project/speculators#739, SpecForge#659, NeMo#7952) --------

def marker_of(path) -> Path:
    return Path(path).with_name(Path(path).name + ".complete")


def write_marker(path, data: bytes, **fields):
    """After the checkpoint at `path` is whole (its bytes `data`), write `<path>.complete` atomically: the sha256
    of those bytes and `fields` (its weights' digest, step). Written last, it is the commit point."""
    record = {"sha256": hashlib.sha256(data).hexdigest(), **fields}
    atomic_write(marker_of(path), lambda f: f.write(json.dumps(record).encode()))


def is_complete(path) -> bool:
    """Whether `path` has its marker and its bytes are the ones the marker names (no torn or swapped file)."""
    try:
        record = json.loads(marker_of(path).read_text())
        return hashlib.sha256(Path(path).read_bytes()).hexdigest() == record["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def rotate_on_rank0(events, old_paths, delete):
    """Keep the newest checkpoints: after a barrier (no rank still reads an old one), rank 0 alone calls
    `delete(path)` for each of `old_paths`; no two ranks delete the same file (transformers#20988, Accelerate#1982).
    Raises SyncFailed (recorded) when the barrier fails."""
    if not watched(events, "barrier", dist.barrier):
        raise SyncFailed
    if dist.get_rank() == 0:
        for path in old_paths:
            delete(path)


def agreed_tag(events, candidates, whole):
    """The newest tag every rank holds whole, or None: rank 0 lists `candidates()` (newest first; its tag file's
    first) and sends them; every rank checks `whole(tag)` (its own shard and the files it reads are there) and an
    all-reduce MIN over the answers keeps the first that no rank lacks. Nobody loads before all agree, so no rank
    dies on a missing shard while its peers load (DeepSpeed#2319, DeepSpeed PR#1388). Raises SyncFailed (recorded)."""
    import torch

    tags = rank0_decides(events, lambda: list(candidates()))
    if not tags:
        return None
    have = torch.tensor([1 if whole(tag) else 0 for tag in tags], dtype=torch.int32)
    if not watched(events, "agree", lambda: dist.all_reduce(have, op=dist.ReduceOp.MIN)):
        raise SyncFailed
    return next((tag for tag, ok in zip(tags, have.tolist()) if ok), None)


def publish_tag_last(events, tag_file, tag: str):
    """After every rank's save returned: a barrier (every shard is written), then rank 0 writes the tag to a
    temporary name and renames it onto `tag_file` (atomic_write): the tag never names a checkpoint whose shards have
    not landed, and never reads half written. Raises SyncFailed (recorded) when the barrier fails."""
    if not watched(events, "barrier", dist.barrier):
        raise SyncFailed
    if dist.get_rank() == 0:
        atomic_write(tag_file, lambda f: f.write(tag.encode()))


def publish_manifest_last(events, tag_file, manifest, tag: str, run: str, **fields):
    """publish_tag_last, then rank 0 writes `manifest` atomically, last: JSON naming the run (its id), the tag and
    `fields`. Raises SyncFailed (recorded) when the barrier fails."""
    publish_tag_last(events, tag_file, tag)
    if dist.get_rank() == 0:
        atomic_write(manifest, lambda f: f.write(json.dumps({"run": run, "tag": tag, **fields}).encode()))


def manifest_tag(manifest, run: str):
    """The tag `manifest` names when run `run` wrote it; None when there is none, it is unreadable, or another run
    wrote it (a tag an older run left in the folder is never resumed from)."""
    try:
        record = json.loads(Path(manifest).read_text())
    except (OSError, ValueError):
        return None
    return record.get("tag") if isinstance(record, dict) and record.get("run") == run else None


def remove_checkpoint(path):
    """Delete a checkpoint (a file with its marker, or a dcp folder): the marker first, so that a checkpoint
    half deleted never reads as complete. A path already gone raises FileNotFoundError, as os.remove does."""
    path = Path(path)
    marker_of(path).unlink(missing_ok=True)
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


# --- torch.distributed.checkpoint without foreign code ---------------------------------------------------

class CheckpointFailed(Exception):
    """dcp's CheckpointException, which derives from BaseException (torch 2.14), as an Exception that the
    fixes record instead of dying on; `failures` is the same per-rank map of what each rank raised."""

    def __init__(self, e):
        super().__init__(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
        self.failures = getattr(e, "failures", {})


def dcp_save(state: dict, path, **options):
    """dcp.save of `state` to `path`; options: dcp.save's own (storage_writer)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        dcp.save(state, checkpoint_id=str(path), **options)
    except CheckpointException as e:
        raise CheckpointFailed(e) from None


def dcp_load(state: dict, path, **options):
    """dcp.load into `state` with safe_dcp_reader: its .metadata runs no foreign code."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        dcp.load(state, checkpoint_id=str(path), storage_reader=safe_dcp_reader(path), **options)
    except CheckpointException as e:
        raise CheckpointFailed(e) from None


def safe_dcp_reader(path):
    """dcp's FileSystemReader for `path`, except that `.metadata` is unpickled with only the classes dcp
    writes there. torch 2.14's own reader calls pickle.load on it, which runs whatever the file names:
    a checkpoint folder from elsewhere could run code on every rank (found by tests/e2e/test_fuzz.py)."""
    import pickle

    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class MetadataUnpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) in DCP_METADATA_GLOBALS or (module == "torch" and name in DTYPES):
                return super().find_class(module, name)
            if module == DCP_METADATA:  # a class it defines, not what it imported (a dotted name reaches its `os`)
                found = super().find_class(module, name)
                if isinstance(found, type) and found.__module__ == module:
                    return found
            raise pickle.UnpicklingError(f"{module}.{name} is not something dcp writes in .metadata: not loaded")

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            rank = kwargs.get("rank")
            with open(Path(self.path) / (".metadata" if rank is None else f"__{rank}.metadata"), "rb") as f:
                metadata = MetadataUnpickler(f).load()
            if getattr(metadata, "storage_meta", None) is None:  # as torch's own reader does
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(path)


DCP_METADATA = "torch.distributed.checkpoint.metadata"  # the module of the classes dcp pickles in .metadata
DCP_METADATA_GLOBALS = {("pathlib", "PosixPath"), ("torch", "Size"), ("torch.serialization", "_get_layout"),
                        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("collections", "OrderedDict")}
DTYPES = {"float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
          "complex64", "complex128"}


# --- async saves: a save that training does not wait for (checkpoint.async_save; docs/async.md) ---------------

def group_of_its_own():
    """A gloo process group for the save's collectives alone, so that they never pair with training's on the same
    group (KempnerForge#104, torchtitan PR#313). Collective: every rank calls it at the same point."""
    return dist.new_group(backend="gloo")


def complete_when_durable(events, pending, group, publish):
    """The completion step of an async save: wait for its Future (`pending.result()`, as torch documents), a
    barrier on the save's group, then rank 0 calls `publish()` (the pointer, the cleanup): nothing names or deletes
    a checkpoint before every rank's part is durable (KempnerForge#102/PR#103). Raises SyncFailed (recorded)."""
    pending.result()
    if not watched(events, "barrier", lambda: dist.barrier(group=group)):
        raise SyncFailed
    if dist.get_rank() == 0:
        publish()


def fresh_folder(path) -> Path:
    """Where a save over `path` goes first: a fresh folder beside it (Orbax's design); rename_into_place commits it."""
    path = Path(path)
    return path.with_name(f".{path.name}.incoming")


def rename_into_place(incoming, path):
    """Rank 0, once every rank's part of `incoming` is durable: the old `path` moves aside, `incoming` is renamed
    onto it, the old one is deleted. A crash at any point leaves `path` or `path.old` whole, never a mix."""
    incoming, path = Path(incoming), Path(path)
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        os.replace(path, old)
    os.replace(incoming, path)
    shutil.rmtree(old, ignore_errors=True)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def remove_when_durable(events, wait_for_writes, remove):
    """A retention's removal under async IO (the completion step of on_durable, where the removal runs on the saving
    rank alone): `wait_for_writes()` returns once every write submitted before it is durable, and raises the error of
    one that failed; only then `remove()`. The old checkpoint goes once the one that replaces it has landed, as a
    synchronous save has it since Lightning#1150 (Lightning#14035: with AsyncCheckpointIO it went first). Raises
    SyncFailed (recorded) when a write failed: the old checkpoint is kept."""
    if not watched(events, "writes", wait_for_writes):
        raise SyncFailed
    remove()
