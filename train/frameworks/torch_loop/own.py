"""fix=own for the resume loop: a class of yours in place of the loop's own save and resume, with the interface of
docs/fixes/torch_loop.md's Rank0Checkpoints (the contract's own_bases, framework.py): built with the checkpoint
folder and fix.kwargs; save(epoch, state) on every rank after each epoch; resume() on every rank at each attempt's
start, returning the state saved ({"model", "epoch", "step"}) or None.

Your class cooperates with nothing: the scenario's faults are placed at what it does to the checkpoint folder.
  mid_write     rank 0, at fault.kill_epoch's save: SIGKILLed halfway through the first write of 1 KiB or more to a
                file in the folder (a checkpoint's bytes, not a pointer's or a marker's), through Python's open or
                torch.save to a path (which writes in C++). For that one call, open and torch.save are wrapped
                (public functions: no seam of a class of yours can cut its bytes); nowhere else.
  after_save    rank 0, once its save returned (faults.kill_point)
  stale_listing on a restart, every rank but 0 lists the folder without its newest entry (os.listdir and
                os.scandir wrapped for its resume() call alone, as a stale NFS directory cache would answer)
  delete_race   a remove in the folder (audit hook: os.remove, shutil.rmtree) waits as the loop's own does
                (faults.before_delete); rank 0's waits for a peer that deletes it too, or for every peer's save to
                return (a class where rank 0 alone deletes never waits long)
  async_fault   where a scenario saves async (checkpoint.async_save), at what your code does through dcp.async_save
                and dcp.load (own_async.py), instead of the two kills above
Your class's close(), if it has one, is called on every rank once training ends (an async save's last wait).
The loop records the save (save_start, save_end: the largest file the save changed) on rank 0, each resume with
the file this rank's code read (or none: it got the state from a peer), a save that failed removing a file as
rotate_error, and a resume that raised as load_error; the judge reads them as it reads the loop's own.
"""
import builtins
import io
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

from train.events import attempt
from train.frameworks.torch_loop.own_async import ObservedDcp
from train.toolkit.errors import error_fields
from train.toolkit.listing import stale_listing
from train.toolkit.model import weights_digest
from train.toolkit.rank import named_class, say
from train.torch_private import default_store

CUT_AT_BYTES = 1024  # the first write this big is a checkpoint's bytes: a pointer or a marker is smaller
POLL_S = 0.02


def under(folder: str, path) -> bool:
    try:
        return os.path.abspath(os.fsdecode(path)).startswith(os.path.join(folder, ""))
    except TypeError:
        return False  # a file descriptor


def snapshot(folder: str) -> dict:
    """name -> (inode, bytes, mtime) of each file in the folder."""
    out = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_file():
                st = entry.stat()
                out[entry.name] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


class CutFile:
    """A file opened for writing in the folder: its first write of CUT_AT_BYTES or more writes half, then `cut`."""

    def __init__(self, f, cut):
        self._f, self._cut = f, cut

    def write(self, data):
        if len(data) >= CUT_AT_BYTES:
            self._f.write(data[:len(data) // 2])
            self._f.flush()
            os.fsync(self._f.fileno())
            self._cut(self._f.name)
        return self._f.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._f, name)


class OwnCheckpoints:
    """The loop's save and resume, done by the class fix._target_ names, with the scenario's faults around it."""

    def __init__(self, cfg: dict, folder: Path, events, faults):
        self.folder, self.events, self.faults, self.fault = os.path.abspath(folder), events, faults, cfg["fault"]
        self.timeout_s = cfg["timeout"]["collective_s"]
        self.me, self.peers = dist.get_rank(), range(1, dist.get_world_size())
        # an async scenario's faults sit in dcp: observed before your module is imported (own_async.py)
        self.dcp = ObservedDcp(events, faults) if cfg["checkpoint"]["async_save"] else None
        self.user = named_class(cfg["fix"]["_target_"])(str(folder), **cfg["fix"]["kwargs"])
        self.doing = None  # ("save", epoch) or ("resume",) while your code runs, on the loop's thread
        self.removing = None  # the last file your code's save removed (or began to)
        self.read = {}  # path -> bytes: what your code read in this resume
        self.guard = threading.local()
        sys.addaudithook(self.hook)

    # --- the loop's calls ---
    def save(self, epoch: int, step: int, weights: dict):
        """Your save, on every rank; rank 0 records it and may be killed in it or after it. An async one is
        recorded and faulted through dcp (own_async.py), and its point once dispatched is when your save returned."""
        synchronous = self.dcp is None
        before = snapshot(self.folder) if self.me == 0 and synchronous else {}
        if self.me == 0 and synchronous:
            self.events.record("save_start", epoch=epoch, step=step, path=None)
        state = {"model": weights, "epoch": epoch, "step": step}
        if self.dcp:
            self.dcp.saving = (epoch, step, weights_digest(weights))
        self.doing, self.removing = ("save", epoch), None
        try:
            if synchronous and self.kills("mid_write", epoch):
                with self.cut_writes(epoch):
                    self.user.save(epoch, state)
                self.killed("after_save", epoch, self.folder, "its bytes went nowhere the loop could cut them")
            else:
                self.user.save(epoch, state)
        except OSError as e:
            if e.filename and os.path.abspath(os.fsdecode(e.filename)) == self.removing:  # its delete of that file
                self.events.record("rotate_error", path=self.removing, **error_fields(e))
                say(f"Deleting {os.path.basename(self.removing)} failed in your class: {type(e).__name__}: {e}")
                e.race_lab = "rotate_error"  # recorded already: not a train_error too
            raise
        finally:
            self.doing = None
        if self.fault["delete_race"] and self.me != 0:
            default_store().set(f"race-lab/own/saved/{epoch}/{self.me}", "1")
        if self.dcp:
            self.faults.async_dispatched(epoch, self.dcp.dispatched or self.folder)
        elif self.me == 0:
            after = snapshot(self.folder)
            changed = [n for n, v in after.items() if before.get(n) != v]
            path = os.path.join(self.folder, max(changed, key=lambda n: after[n][1])) if changed else None
            self.events.record("save_end", epoch=epoch, step=step, path=path, digest=weights_digest(weights),
                               bytes=after[os.path.basename(path)][1] if path else 0)
            self.faults.kill_point("after_save", epoch, path or self.folder)

    def resume(self):
        """Your resume, on every rank: (the state or None, the largest file this rank's code read or None)."""
        self.read, self.doing = {}, ("resume",)
        if self.dcp:
            self.dcp.loaded, self.dcp.digests = None, {}
        stale = self.fault["stale_listing"] and self.me != 0 and attempt() > 0
        try:
            if stale:
                with stale_listing(self.folder, self.events):
                    state = self.user.resume()
            else:
                state = self.user.resume()
        except Exception as e:
            self.events.record("load_error", path=self.largest_read(), **error_fields(e))
            say(f"Resume failed in your class: {type(e).__name__}: {e}")
            raise
        finally:
            self.doing = None
        if self.dcp and self.dcp.loaded and state is not None:  # a dcp folder read: its shards, each rank's
            for shard, digest in sorted(self.dcp.digests.items()):
                self.events.record("shard_read", step=int(state["step"]), shard=shard, digest=digest,
                                   path=self.dcp.loaded)
            return state, self.dcp.loaded
        return state, self.largest_read()

    def close(self):
        """Your class's close(), if it has one, on every rank once training ends."""
        close = getattr(self.user, "close", None)
        if close is None:
            return
        self.doing = ("close",)
        try:
            close()
        finally:
            self.doing = None

    def largest_read(self):
        return max(self.read, key=self.read.get) if self.read else None

    # --- the faults, at what your code does ---
    def kills(self, at: str, epoch: int) -> bool:
        return self.fault["kill_epoch"] == epoch and self.fault["kill_at"] == at and self.me == 0 and attempt() == 0

    def killed(self, at: str, epoch: int, path, why: str):
        """The kill the scenario placed in the save found no place there: rank 0 dies once the save returned."""
        self.events.record("crash", at=at, epoch=epoch, path=str(path))
        say(f"Killed with SIGKILL after epoch {epoch}'s save: {why} (fault.kill_epoch).")
        os.kill(os.getpid(), signal.SIGKILL)

    @contextmanager
    def cut_writes(self, epoch: int):
        """Rank 0's first write of a checkpoint's bytes in the folder stops halfway (SIGKILL), through Python's
        open or through torch.save to a path. The wrap stands for this save call alone."""
        real_open, real_save, folder = builtins.open, torch.save, self.folder

        def cut(path):
            self.faults.kill_point("mid_write", epoch, path)

        def open_cut(file, mode="r", *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            if under(folder, file) and isinstance(mode, str) and any(c in mode for c in "wax+"):
                return CutFile(f, cut)
            return f

        def save_cut(obj, f, *args, **kwargs):
            if isinstance(f, (str, os.PathLike)) and under(folder, f):  # torch writes a path in C++: cut its bytes
                buffer = io.BytesIO()
                real_save(obj, buffer, *args, **kwargs)
                with open_cut(f, "wb") as out:
                    out.write(buffer.getvalue())
                return None
            return real_save(obj, f, *args, **kwargs)  # a file object: open_cut made it, if it is in the folder

        builtins.open = io.open = open_cut
        torch.save = save_cut
        try:
            yield
        finally:
            builtins.open = io.open = real_open
            torch.save = real_save

    def hook(self, event, args):
        """What your code does in the folder while the loop is in your class: reads noted; removes held for the
        delete race. Never raises into your code."""
        if self.doing is None or getattr(self.guard, "busy", False) or not args or threading.current_thread() is \
                not threading.main_thread():
            return
        self.guard.busy = True
        try:
            if event == "open" and under(self.folder, args[0]) and self.doing[0] == "resume":
                mode = args[1] if len(args) > 1 else "r"
                if isinstance(mode, str) and not any(c in mode for c in "wax+"):
                    path = os.path.abspath(os.fsdecode(args[0]))
                    self.read[path] = os.path.getsize(path) if os.path.exists(path) else 0
            elif event in ("os.remove", "shutil.rmtree") and under(self.folder, args[0]):
                self.removing = os.path.abspath(os.fsdecode(args[0]))
                if self.fault["delete_race"] and os.path.lexists(self.removing):  # a file not there races with none
                    self.before_delete(self.removing)
        except Exception:  # noqa: BLE001 (the loop's watch never breaks what it watches)
            pass
        finally:
            self.guard.busy = False

    def before_delete(self, path: str):
        if self.me != 0:
            self.faults.listed([path])
            self.faults.before_delete(path, self.timeout_s)
            return
        epoch = self.doing[1] if self.doing[0] == "save" else None
        store, name = default_store(), os.path.basename(path)
        keys = [f"race-lab/listed/{name}"]
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if store.check(keys) or (epoch is not None and
                                     store.check([f"race-lab/own/saved/{epoch}/{r}" for r in self.peers])):
                return
            time.sleep(POLL_S)
