"""What goes wrong, placed on purpose: every fault a scenario can ask for, at a named point.

Every framework's adapter (train/frameworks/<name>/) calls these points at its public seams, and never decides a
fault itself. A point acts on the *real* rank (the process group's), which a
misdetected rank (fault.misdetect_rank) does not change.

  shape_metric     the monitored value after each epoch (fault.best_epoch)
  before_last_save a crash, the skew's stall, a misdetected rank
  write            the bytes of a checkpoint reach the file: a stall or an OSError halfway
  before_load      a reader's pause at the start of its load (fault.read_delay_s)
The resume's (workload=resume; fault.kill_epoch, kill_at, stale_listing, delete_race):
  resume_write     a checkpoint's bytes reach the file; rank 0 may be SIGKILLed halfway (crash_mid_save)
  kill_point       a named place in a save where rank 0 may be SIGKILLed (after_save, dcp's commit)
  listing          the checkpoint names a rank sees when it resumes (a stale listing: resume_disagree)
  before_delete    a rotation's delete of an old checkpoint (it comes second: cleanup)
The async save's (checkpoint.async_save; fault.async_fault at fault.kill_epoch's save, first attempt):
  async_before_shard / async_after_shard   a rank's write of its shard, in the save's thread: in_flight stalls rank
                   0's there (the save stays in flight); overwrite kills rank 1 before its write once rank 0 wrote;
                   exit_pending stalls rank 0's write there (a slow disk) until the loop waits for it or the
                   rank has left; overlap holds rank 0's write there until the loop has dispatched the next save
  async_dispatched the loop's steps after dispatching a save are done: in_flight kills rank 0 here, save in flight
  async_awaited    the loop begins to wait for a save (its Future, or the fix's completion step): exit_pending's
                   write ends its stall
  async_write      Lightning's wrapped CheckpointIO, in AsyncCheckpointIO's thread, before it writes: slow_write
                   stalls there (a slow disk); the kill is kill_point's after_save, once the save has returned
A kill is SIGKILL from the rank itself, on the first attempt only: no exception, no handler, no flush.
"""
import errno
import os
import signal
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from train.toolkit import hang
from train.torch_private import default_store


class Faults:
    def __init__(self, cfg: dict, events, say):
        """cfg: the run's config; events: this rank's EventLog; say: a console line."""
        self.skew, self.fault, self.epochs = cfg["skew"], cfg["fault"], cfg["epochs"]
        self.collective_s = cfg["timeout"]["collective_s"]
        self.events, self.say = events, say
        self.in_flight = threading.Event()  # fault.async_fault=in_flight: rank 0's save thread holds its save
        self.dispatched = -1  # the newest epoch whose async save the loop has dispatched (overlap)
        self.awaited = -1  # the newest epoch whose async save the loop has begun to wait for (exit_pending)

    @property
    def rank(self) -> int:
        return dist.get_rank()

    def shape_metric(self, value: float, epoch: int) -> float:
        """With best_epoch set, a value that rises until that epoch and falls after it."""
        best = self.fault["best_epoch"]
        if best is None:
            return value
        return -abs(epoch - (best if best >= 0 else self.epochs + best))

    def before_last_save(self):
        if self.rank == self.fault["crash_rank"]:
            self.events.record("crash")
            self.say("Crashing on purpose (fault.crash_rank).")
            os._exit(1)
        if self.fault["misdetect_rank"]:  # what a launch that sets neither looks like to fastai
            os.environ["RANK"] = "0"
            os.environ.pop("WORLD_SIZE", None)
            self.events.record("rank_misdetected")
        if self.rank == self.skew["rank"] and self.skew["seconds"] > 0:
            self._stall("skew", self.skew["seconds"])

    def write(self, f, data: bytes, last: bool):
        """Write a checkpoint's bytes into the open file f, in two halves. On rank 0's last save the
        scenario may stall between them (a filesystem that hangs) or fail there (a full disk)."""
        half = len(data) // 2
        f.write(data[:half])
        f.flush()
        if last and self.rank == 0:
            if self.skew["mid_write_s"] > 0:
                self._stall("skew", self.skew["mid_write_s"], at="mid_write")
            if self.fault["save_error"]:
                code = getattr(errno, self.fault["save_error"])
                raise OSError(code, os.strerror(code))  # as a full disk fails write()
        f.write(data[half:])

    def before_load(self):
        if self.rank != 0 and self.fault["read_delay_s"] > 0:
            self._stall("read_delay", self.fault["read_delay_s"])

    # --- the resume loop's points (framework=torch_loop) ---
    def resume_write(self, f, data: bytes, epoch: int, path):
        """Write a checkpoint's bytes into the open file f, in two halves; with kill_at=mid_write, rank 0 is
        killed between them at fault.kill_epoch's save (the first half is fsynced: a torn file is left)."""
        half = len(data) // 2
        f.write(data[:half])
        f.flush()
        os.fsync(f.fileno())
        self.kill_point("mid_write", epoch, path)
        f.write(data[half:])

    def kill_point(self, at: str, epoch: int, path):
        """SIGKILL rank 0 here if the scenario places its kill at `at` in this epoch's save, on the first attempt."""
        from train.events import attempt

        if (self.fault["kill_epoch"] == epoch and self.fault["kill_at"] == at and self.rank == 0
                and attempt() == 0):
            self.events.record("crash", at=at, epoch=epoch, path=str(path))
            self.say(f"Killed with SIGKILL {at.replace('_', ' ')} of epoch {epoch}'s checkpoint (fault.kill_epoch).")
            os.kill(os.getpid(), signal.SIGKILL)

    def _shard_at(self, epoch: int) -> bool:
        from train.events import attempt

        return self.fault["kill_epoch"] == epoch and self.fault["kill_at"] == "before_shard" and attempt() == 0

    def kills_before_shard(self, epoch: int) -> bool:
        """Whether before_shard kills this rank at this epoch's save (rank 1, kill_at=before_shard, first attempt)."""
        return self._shard_at(epoch) and self.rank == 1

    def shards_committed(self, epoch: int, tag: str):
        """A sharded save (framework=deepspeed) on rank 0, where its engine commits the checkpoint, right before it
        would write the tag file. kill_at=before_shard: says so on the rendezvous store, for before_shard."""
        if self._shard_at(epoch) and self.rank == 0:
            default_store().set(f"race-lab/shards/committed/{tag}", "1")

    def before_shard(self, epoch: int, path, latest, tag: str, timeout_s: float):
        """A sharded save (framework=deepspeed), before this rank writes its shard. kill_at=before_shard: rank 1, at
        fault.kill_epoch's save on the first attempt, waits until rank 0 has committed the save (shards_committed,
        up to timeout_s) and then up to 2 s for `latest` to name its tag (DeepSpeed writes it then, without waiting
        for the other ranks' shards; a fix that writes it later never does), then is killed with SIGKILL."""
        if not (self._shard_at(epoch) and self.rank == 1):
            return
        try:
            default_store().wait([f"race-lab/shards/committed/{tag}"], timedelta(seconds=timeout_s))
        except (RuntimeError, dist.DistError):
            pass
        deadline = time.monotonic() + (2.0 if latest else 0.0)  # latest None: no tag file (framework=ray_train)
        while time.monotonic() < deadline:
            try:
                if open(latest).read().strip() == tag:
                    break
            except OSError:
                pass
            time.sleep(0.02)
        self.events.record("crash", at="before_shard", epoch=epoch, path=str(path))
        self.say(f"Killed with SIGKILL before its shard of {tag} landed (fault.kill_epoch).")
        os.kill(os.getpid(), signal.SIGKILL)

    def listing(self, names: list) -> list:
        """The checkpoint names (oldest first) this rank sees when it resumes. With fault.stale_listing, after
        a restart every rank but 0 misses the newest, as a stale directory cache would (NFS's attribute cache)."""
        from train.events import attempt

        if self.fault["stale_listing"] and self.rank != 0 and attempt() > 0 and names:
            self.events.record("stale_listing", hidden=str(names[-1]))
            return names[:-1]
        return names

    def listed(self, paths: list):
        """A rotation's listing of the old checkpoints it is about to delete. With fault.delete_race, every rank
        but 0 says so on the rendezvous store (each attempt has its own keys, train/rank/worker.py)."""
        if self.fault["delete_race"] and self.rank != 0:
            store = default_store()
            for path in paths:
                store.set(f"race-lab/listed/{os.path.basename(path)}", "1")

    def before_delete(self, path, timeout_s: float):
        """With fault.delete_race, two ranks delete one file, rank 0 first: rank 0 waits until a peer has listed
        it (up to timeout_s), and a peer waits until rank 0 has deleted it (transformers#20988)."""
        if not self.fault["delete_race"]:
            return
        if self.rank == 0:
            try:
                default_store().wait([f"race-lab/listed/{os.path.basename(path)}"],
                                                                 timedelta(seconds=timeout_s))
            except (RuntimeError, dist.DistError):  # no peer listed it in time: delete anyway
                pass
            return
        deadline = time.monotonic() + timeout_s
        while os.path.lexists(path) and time.monotonic() < deadline:
            time.sleep(0.02)

    # --- the async save's points (checkpoint.async_save, fault.async_fault) ---
    def _async_at(self, case: str, epoch: int) -> bool:
        from train.events import attempt

        return self.fault["async_fault"] == case and self.fault["kill_epoch"] == epoch and attempt() == 0

    def async_before_shard(self, epoch: int, rank: int):
        """In the save's thread, before `rank` writes its shard. overwrite: rank 1 waits until rank 0 has written
        its shard (the rendezvous store says so), then is killed with SIGKILL before writing its own. exit_pending:
        rank 0's write takes EXIT_PENDING_S (a slow disk) and goes on until the loop waits for it or the rank has
        left (_write_until_the_loop_is_done): a loop that does not wait ends with the save pending. overlap:
        rank 0's write lasts until the loop has dispatched the next save (up to EXIT_PENDING_S), then OVERLAP_S more,
        so two saves are in flight at once."""
        if self._async_at("exit_pending", epoch) and rank == 0:
            self._write_until_the_loop_is_done(epoch)
        if self._async_at("overlap", epoch) and rank == 0:  # until the next save is dispatched, up to 3 s
            self.events.record("slow_write_start", seconds=EXIT_PENDING_S, epoch=epoch)
            deadline = time.monotonic() + EXIT_PENDING_S
            while self.dispatched <= epoch and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(OVERLAP_S if self.dispatched > epoch else 0)  # the next save's thread is under way
            self.events.record("slow_write_end", next_dispatched=self.dispatched > epoch)
        if self._async_at("overwrite", epoch) and rank == 1:
            try:
                default_store().wait([f"race-lab/async/wrote/{epoch}"], timedelta(seconds=30))
            except (RuntimeError, dist.DistError):
                pass
            self.events.record("crash", at="before_write", epoch=epoch, path=f"shard {rank}")
            self.say(f"Killed with SIGKILL before writing its shard of epoch {epoch}'s checkpoint (fault.async_fault).")
            os.kill(os.getpid(), signal.SIGKILL)

    def async_after_shard(self, epoch: int, rank: int):
        """In the save's thread, once `rank` wrote its shard. overwrite: rank 0 says so on the store. in_flight:
        rank 0's save thread stalls here for good, so the save stays in flight until rank 0 is killed."""
        if self._async_at("overwrite", epoch) and rank == 0:
            default_store().set(f"race-lab/async/wrote/{epoch}", "1")
        if self._async_at("in_flight", epoch) and rank == 0:
            self.in_flight.set()  # written, not committed: the save is in flight from here on, for good
            threading.Event().wait()

    def async_dispatched(self, epoch: int, path):
        """In the loop, once it has dispatched a save and done what it does right after. in_flight: rank 0 is
        killed with SIGKILL here, IN_FLIGHT_S after its save thread wrote its shard and began to hold (async_after_shard):
        the save is in flight, written and not committed."""
        self.dispatched = max(self.dispatched, epoch)
        if self._async_at("in_flight", epoch) and self.rank == 0:
            self.in_flight.wait(timeout=30)  # its shard is written and its save thread holds: surely in flight
            time.sleep(IN_FLIGHT_S)  # a crash some way into the window, not at its first instant
            self.events.record("crash", at="in_flight", epoch=epoch, path=str(path))
            self.say(f"Killed with SIGKILL while epoch {epoch}'s async save is in flight (fault.async_fault).")
            os.kill(os.getpid(), signal.SIGKILL)

    def async_awaited(self, epoch: int):
        """In the loop, as it begins to wait for epoch's async save (its Future, or the fix's completion step)."""
        self.awaited = max(self.awaited, epoch)

    def _write_until_the_loop_is_done(self, epoch: int):
        """exit_pending's slow write: EXIT_PENDING_S, then on until the loop waits for this save or the rank has
        left (its process group destroyed), up to timeout.collective_s. That a loop which does not wait ends with
        the save pending is so by construction, not by how fast a loaded machine runs the loop's end (its count at
        the end waits for every rank, which can take longer than the write)."""
        self.events.record("slow_write_start", seconds=EXIT_PENDING_S, epoch=epoch)
        time.sleep(EXIT_PENDING_S)
        deadline = time.monotonic() + self.collective_s
        while self.awaited < epoch and dist.is_initialized() and time.monotonic() < deadline:
            time.sleep(0.02)
        until = "awaited" if self.awaited >= epoch else "rank_left" if not dist.is_initialized() else "timeout"
        self.events.record("slow_write_end", until=until)

    def async_write(self, epoch: int):
        """framework=lightning, in AsyncCheckpointIO's thread, before the wrapped CheckpointIO writes epoch's
        checkpoint. slow_write: at fault.kill_epoch's save (first attempt) the write stalls fault.slow_write_s first,
        a slow disk; rank 0 is killed once that save has returned (kill_at=after_save), its write still in flight."""
        if self._async_at("slow_write", epoch) and self.rank == 0:
            self._stall("slow_write", self.fault["slow_write_s"], epoch=epoch)

    def _stall(self, name, seconds, **fields):
        """A stall of `seconds`; the skew's ends once every other rank is settled (skew.end_when_settled)."""
        self.events.record(f"{name}_start", seconds=seconds, **fields)
        settled = False
        if ends_when_settled(name, self.skew, self.fault):
            settled = hang.stall_until_settled(seconds, self.collective_s)
        else:
            time.sleep(seconds)
        self.events.record(f"{name}_end", **({"settled": True} if settled else {}))


IN_FLIGHT_S = 2.0  # fault.async_fault=in_flight: how far into the save's window rank 0 is killed
OVERLAP_S = 1.5  # fault.async_fault=overlap: how long rank 0's slow write goes on once the next save is dispatched
EXIT_PENDING_S = 3.0  # fault.async_fault=exit_pending: how long rank 0's write of fault.kill_epoch's shard takes
ASYNC_FAULTS = {
    "in_flight": "rank 0 is killed with SIGKILL while fault.kill_epoch's async save is still being written",
    "shared_group": "the async save's collectives run on the training's process group",
    "overwrite": "every save goes into one folder, over the last; at fault.kill_epoch's save rank 1 is killed before "
                 "writing its shard, once rank 0 has written its own",
    "slow_write": "at fault.kill_epoch's save rank 0's write takes {slow_write_s:g} s (a slow disk), and rank 0 is "
                  "killed with SIGKILL once that save has returned, on the first attempt",
    "overlap": "the loop dispatches each async save without waiting for the one before; at fault.kill_epoch's save "
               f"rank 0's write of its shard lasts until the next save is dispatched (up to {EXIT_PENDING_S:g} s, a "
               "slow disk), on the first attempt",
    "exit_pending": "the loop does not wait for its last save before the process ends; at fault.kill_epoch's save "
                    f"rank 0's write of its shard takes {EXIT_PENDING_S:g} s (a slow disk) and lasts until the loop "
                    "waits for it or the rank has left, on the first attempt",
}


def ends_when_settled(name: str, skew: dict, fault: dict) -> bool:
    """Whether a stall may end once every other rank is settled: the skew's, with skew.end_when_settled, and not
    where ranks are misdetected (many_writers): there a peer's barrier is its own, with no WORLD_SIZE (fastai's
    is then a no-op), so a peer seen in it is not waiting for rank 0, and could read in the rest of the stall."""
    return name == "skew" and skew["end_when_settled"] and not fault["misdetect_rank"]


def describe(cfg: dict) -> str:
    """In words, what this run's scenario injects: who stalls, where, how long, and what else. For the
    header of every run (the launcher's); pure, over the config."""
    skew, fault, ckpt, parts = cfg["skew"], cfg["fault"], cfg["checkpoint"], []
    if fault["crash_rank"] is not None:
        parts.append(f"rank {fault['crash_rank']} dies where its last save would start")
    if fault["misdetect_rank"]:
        parts.append("at the last save every process believes it is rank 0 (RANK and WORLD_SIZE unset), so all write")
    if skew["seconds"] > 0:
        parts.append(f"rank {skew['rank']} stalls {skew['seconds']:g} s right before its last save")
    if skew["mid_write_s"] > 0:
        parts.append(f"rank 0 stalls {skew['mid_write_s']:g} s halfway through writing the last checkpoint")
    if fault["save_error"]:
        code = getattr(errno, fault["save_error"])
        parts.append(f"rank 0's last save fails halfway with OSError {fault['save_error']} ({os.strerror(code)})")
    if fault["kill_epoch"] is not None and not fault["async_fault"]:  # an async fault says its own
        where = {"mid_write": "rank 0 is killed with SIGKILL halfway through writing",
                 "after_save": "rank 0 is killed with SIGKILL right after it completes",
                 "before_shard": "rank 1 is killed with SIGKILL before its shard lands, `latest` already naming"}
        parts.append(f"{where[fault['kill_at']]} epoch {fault['kill_epoch']}'s checkpoint, on the "
                     f"first attempt (torch elastic restarts up to {cfg['launch']['max_restarts']} times)")
    if fault["stale_listing"]:
        parts.append("after a restart every rank but 0 lists the checkpoints without the newest (a stale listing)")
    if fault["delete_race"]:
        parts.append("two ranks delete the same old checkpoint, rank 0 first")
    if fault["older_run"]:
        parts.append(f"an earlier run (seed {(cfg['seed'] + 1) % 2 ** 32}) left its epoch-0 checkpoint and its tag in the folder")
    if ckpt["async_save"]:
        how = "Lightning's AsyncCheckpointIO" if cfg["framework"]["name"] == "lightning" else "dcp.async_save"
        parts.append(f"checkpoints are saved in the background ({how}) while training goes on")
    parts += [ASYNC_FAULTS[fault["async_fault"]].format(**fault)] if fault["async_fault"] else []
    if ckpt["keep_last"]:
        parts.append(f"checkpoints rotate: the newest {ckpt['keep_last']} are kept")
    if ckpt["pointer"] and cfg["framework"]["name"] == "lightning":
        parts.append("last.ckpt is a link to the newest checkpoint (save_last=\"link\")")
    elif ckpt["pointer"]:
        parts.append("the newest checkpoint is found through a `latest` pointer file")
    if fault["read_delay_s"] > 0:
        parts.append(f"every rank but rank 0 pauses {fault['read_delay_s']:g} s before it loads")
    if ckpt["early_saves"]:
        parts.append("every improvement before the last epoch is saved too, so an older checkpoint is there to read")
    if ckpt["keep_existing"]:
        parts.append("a checkpoint left in checkpoint.dir by an earlier run is kept")
    if fault["best_epoch"] is not None and cfg["workload"] == "load_best":  # a resume keeps no best
        best = "the last epoch" if fault["best_epoch"] == -1 else f"epoch {fault['best_epoch']}"
        parts.append(f"the monitored metric is shaped so {best} is the best")
    if ckpt["guard"] != "none":
        parts.append(f"each rank checks on its own whether the file exists before its {ckpt['guard']} "
                     "and skips it if not")
    if ckpt["node_local"]:
        parts.append("each node keeps its checkpoints on its own disk (no shared filesystem)")
    return "; ".join(parts) or "nothing: no stall, no fault"
