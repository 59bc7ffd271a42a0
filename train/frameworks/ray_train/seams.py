"""Ray's upload, observed at its public seam: RunConfig(storage_filesystem=...), the pyarrow filesystem Ray Train
copies every worker's checkpoint files into (storage.py's persist_current_checkpoint: create_dir, then
pyarrow.fs.copy_files). Here it is the local disk through fsspec (pyarrow's FSSpecHandler), and each worker's part,
rank_<r>.pt, is written through the worker's Uploads: the part's bytes in two halves (faults.resume_write: a kill
halfway, crash_mid_save), rank 1's kill before its part lands once rank 0's has (faults.before_shard, shard_lost),
and the events save_start (rank 0, the folder Ray named) and shard_write (each part, once it is whole).
Anything else Ray writes (its controller's snapshot, other processes than a worker) goes through unobserved."""
import json
import re
import time
from pathlib import Path
from typing import Optional

from fsspec.implementations.local import LocalFileSystem
from pyarrow.fs import FSSpecHandler, PyFileSystem
from pyarrow import PythonFile

SNAPSHOT = "checkpoint_manager_snapshot.json"  # Ray's controller's record of the checkpoints, on storage
PART = re.compile(r"^rank_(\d+)\.pt$")  # each worker's part of a checkpoint folder


def part_name(rank: int) -> str:
    return f"rank_{rank}.pt"


class Uploads:
    """One worker's uploads: what it is saving (set before each ray.train.report) and the points at its part."""

    def __init__(self, rank: int, events, faults, timeout_s: float):
        self.rank, self.events, self.faults, self.timeout_s = rank, events, faults, timeout_s
        self.saving: Optional[tuple] = None  # (epoch, step, digest) of the report under way
        self.folder: Optional[Path] = None  # the folder Ray named for it (rank 0 broadcast the name)

    def before(self, path: Path):
        """Where pyarrow is about to open the part's file in the folder Ray named."""
        epoch, step, _ = self.saving
        previous, self.folder = self.folder, path.parent
        if previous is not None and self.faults.kills_before_shard(epoch):
            self.wait_recorded(previous)
        if self.rank == 0:
            self.events.record("save_start", epoch=epoch, step=step, path=str(self.folder))
        # shard_lost: rank 1 waits for rank 0's part to land (Uploads.landed), then is killed before its own
        self.faults.before_shard(epoch, self.folder, None, self.folder.name, self.timeout_s)

    def wait_recorded(self, folder: Path):
        """Until Ray's controller has recorded `folder` as its newest checkpoint (its snapshot on storage), up to
        timeout_s: the kill then comes after the previous checkpoint is Ray's, as in ray-project/ray#41700. Without
        it, a kill within the controller's poll of the previous report loses that checkpoint too (measured: Ray's
        own resume then starts fresh, docs/frameworks.md)."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                snapshot = json.loads((folder.parent / SNAPSHOT).read_text())
                if (snapshot.get("latest_checkpoint_result") or {}).get("checkpoint_dir_name") == folder.name:
                    return
            except (OSError, ValueError):  # not written yet, or being written
                pass
            time.sleep(0.05)

    def landed(self, path: Path):
        epoch, step, digest = self.saving
        self.events.record("shard_write", step=step, shard=self.rank, digest=digest, path=str(path))
        if self.rank == 0:
            self.faults.shards_committed(epoch, self.folder.name)


UPLOADS: Optional[Uploads] = None  # this worker's, set by the worker loop (resume.py); none in Ray's other processes


class ObservedPart:
    """A part's file as pyarrow writes it: the bytes in two halves, its landing recorded once it is closed."""

    def __init__(self, uploads: Uploads, path: Path, raw):
        self.uploads, self.path, self.raw = uploads, path, raw

    def write(self, data) -> int:
        data = bytes(data)
        self.uploads.faults.resume_write(self.raw, data, self.uploads.saving[0], self.path)
        return len(data)

    def close(self):
        self.raw.close()
        self.uploads.landed(self.path)

    def __getattr__(self, name):  # flush, closed, tell, ...: the file's own
        return getattr(self.raw, name)


class ObservedStorage(FSSpecHandler):
    def __init__(self):
        super().__init__(LocalFileSystem())

    def open_output_stream(self, path, metadata):
        if UPLOADS is None or UPLOADS.saving is None or not PART.match(Path(path).name):
            return super().open_output_stream(path, metadata)
        UPLOADS.before(Path(path))
        return PythonFile(ObservedPart(UPLOADS, Path(path), self.fs.open(path, mode="wb")), mode="w")


def observed_storage() -> PyFileSystem:
    return PyFileSystem(ObservedStorage())
