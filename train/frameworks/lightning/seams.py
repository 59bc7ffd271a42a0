"""Lightning's write seam: a filesystem whose writes the scenario's faults reach, and its log kept quiet."""
import logging
import warnings

import fsspec
from fsspec.implementations.local import LocalFileOpener, LocalFileSystem



CHECKPOINT_SUFFIX = ".ckpt"  # ModelCheckpoint's


# --- the write point: where the bytes of a checkpoint reach the file -----------------------------------------

class FaultyFileOpener(LocalFileOpener):
    """fsspec's local file, whose write passes the bytes through train/faults.py's write point."""

    def write(self, data):
        # read on the class (a function there is no method); self.f: the real file (fsspec's temporary one)
        FaultyFileSystem.write_fault(self.f, bytes(data))
        return len(data)


class FaultyFileSystem(LocalFileSystem):
    """fsspec's local filesystem; while a checkpoint is being saved (write_fault set), files opened for writing
    go through train/faults.py, and while a resume looks for the last checkpoint (listing set), so does the
    folder's listing (train/frameworks/lightning/resume.py). Registered for "file" and "local" in the rank's
    process, so Lightning's own writer (_atomic_save's fsspec transaction) and its search for last*.ckpt run
    unchanged on top of it. If this goes, scenario=torn, save_fails, crash_mid_save and resume_disagree have no
    place in Lightning's code: the stall, the OSError, the kill and the stale listing would not happen."""
    write_fault = None  # while a checkpoint is saved: write(f, data), a point of train/faults.py; else None
    listing = None  # while a resume looks for Lightning's last checkpoint: see(folder, paths) -> the paths it sees

    def ls(self, path, detail=True, **kwargs):  # fsspec's public listing: ModelCheckpoint finds last*.ckpt with it
        found = super().ls(path, detail=detail, **kwargs)
        if FaultyFileSystem.listing is None or detail:  # read on the class: a function there is no method
            return found
        return FaultyFileSystem.listing(self._strip_protocol(path), found)

    def _open(self, path, mode="rb", block_size=None, **kwargs):  # fsspec's override point for an implementation
        if self.write_fault is None or "w" not in mode:
            return super()._open(path, mode, block_size, **kwargs)
        path = self._strip_protocol(path)
        if self.auto_mkdir:
            self.makedirs(self._parent(path), exist_ok=True)
        return FaultyFileOpener(path, mode, fs=self, **kwargs)


def use_faulty_filesystem():
    for protocol in ("file", "local"):
        fsspec.register_implementation(protocol, FaultyFileSystem, clobber=True)


# --- the run -------------------------------------------------------------------------------------------------

def quiet():
    """No banners, tables or progress on a rank's console: Lightning's info lines and its advice on workers."""
    for name in ("pytorch_lightning", "lightning_fabric", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*Using `DistributedSampler` with the dataloaders.*")
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated.*")  # torch 2.14
    warnings.filterwarnings("ignore", message=r".*Checkpoint directory .* exists and is not empty.*")
