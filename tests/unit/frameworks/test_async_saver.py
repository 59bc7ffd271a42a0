"""The resume loop's async saver (train/frameworks/torch_loop/async_save.py) on one real gloo rank in this process,
with real dcp.async_save writes into tmp_path and a stand-in for the loop around it (its folder, pointer and
cleanup): what each fix changes, one difference each (issue 43; the slow tier runs the same with two ranks and the
faults). Where the saver waits for a pending save at exit, and which process group its collectives go on."""
import hashlib
import json
import re
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from helpers.gloo import one_rank
from train.frameworks.torch_loop import async_save
from train.frameworks.torch_loop.async_save import AsyncSaver, outdated
from helpers.recorded import Events


class Faults:
    """No fault planted: each of the saver's fault points only records its call, (point, *arguments), and at the
    shard points (the save's thread) the save's stage then; `fail_shard` makes the shard write raise it."""

    def __init__(self):
        self.calls, self.saver, self.fail_shard = [], None, None

    def async_before_shard(self, epoch, rank):
        self.calls.append(("async_before_shard", epoch, rank, self.saver and self.saver.stage))
        if self.fail_shard is not None:
            raise self.fail_shard

    def async_after_shard(self, epoch, rank):
        self.calls.append(("async_after_shard", epoch, rank, self.saver and self.saver.stage))

    def async_dispatched(self, epoch, path):
        self.calls.append(("async_dispatched", epoch, path))

    def async_awaited(self, epoch):
        self.calls.append(("async_awaited", epoch))

    def of_thread(self, save_thread: bool):
        """The calls of the save's thread (the shard points), or of the loop's; each thread's in its order."""
        return [c for c in self.calls if c[0].endswith("_shard") == save_thread]


class Loop:
    """What the saver uses of the resume loop (train/frameworks/torch_loop/resume.py): the folder, `latest` (the
    pointer), the epoch<k> folders oldest first, their deletion, and a weights digest."""

    def __init__(self, folder: Path, fix: str, fault=None, keep=0, pointer=True):
        self.cfg = {"fix": {"name": fix}, "fault": {"async_fault": fault}}
        self.folder, self.keep, self.use_pointer = folder, keep, pointer
        self.events, self.faults, self.deleted = Events(), Faults(), []
        folder.mkdir(parents=True, exist_ok=True)

    def write_pointer(self, path):
        (self.folder / "latest").write_text(path.name)

    def pointer(self):
        latest = self.folder / "latest"
        return latest.read_text() if latest.exists() else None

    def checkpoints(self):
        found = [(int(m.group(1)), p) for p in self.folder.iterdir() if (m := re.match(r"^epoch(\d+)$", p.name))]
        return [p for _, p in sorted(found)]

    def delete(self, path):
        self.deleted.append(Path(path).name)
        shutil.rmtree(path)

    @staticmethod
    def digest_of(weights):
        return f"w{float(weights['w'].sum()):g}"


def weights(value):
    return {"w": torch.full((4,), float(value))}


@pytest.fixture
def rank(tmp_path, monkeypatch):
    """One gloo rank; no hang watcher (hang.store None): with one rank there is no peer to wait for."""
    monkeypatch.setattr(async_save.hang, "store", lambda: None)
    with one_rank(tmp_path):
        yield


def drain(saver):
    """Let a save the saver left pending finish before the rank's group goes (a test's own cleanup)."""
    for pending in [saver.pending, *saver.earlier]:
        if pending is not None:
            pending["future"].result()


@pytest.mark.parametrize("fix", ["on_durable", "fresh_rename", "durable"])
def test_a_fix_that_completes_when_durable_waits_for_the_pending_save_at_exit_though_the_loop_does_not(
        tmp_path, rank, fix):
    """fault.async_fault=exit_pending: the loop ends without waiting for its last save. on_durable (and the fixes
    built on it) still waits at end(): the save is durable, its save_end recorded, and only then is `latest` written."""
    loop = Loop(tmp_path / "m", fix, "exit_pending")
    saver = AsyncSaver(loop)
    saver.save(0, 10, weights(1))
    assert loop.pointer() is None  # not named at dispatch
    saver.end()
    assert [(e["step"], e["digest"]) for e in loop.events.of("save_end")] == [(10, "w4")]
    assert saver.pending is None and loop.pointer() == "epoch0"
    assert (tmp_path / "m" / "epoch0" / ".metadata").exists()
    assert [e["step"] for e in loop.events.of("save_commit")] == [10]


def test_the_loop_as_shipped_leaves_its_last_save_pending_at_exit_with_exit_pending_and_waits_without(
        tmp_path, rank, capsys):
    """It says so where a save is left pending, and says nothing where none was."""
    AsyncSaver(Loop(tmp_path / "none", "in_place", "exit_pending")).end()
    assert capsys.readouterr().out == ""
    loop = Loop(tmp_path / "m", "in_place", "exit_pending")
    saver = AsyncSaver(loop)
    saver.save(0, 10, weights(1))
    assert loop.pointer() == "epoch0"  # named at once, at dispatch
    saver.end()
    assert saver.pending is not None and loop.events.of("save_end") == []  # never waited for
    assert capsys.readouterr().out.endswith(
        " rank 0: The run ends with its last async save still pending (fault.async_fault=exit_pending).\n")
    drain(saver)
    waited = Loop(tmp_path / "w", "in_place")
    saver = AsyncSaver(waited)
    saver.save(0, 10, weights(1))
    saver.end()
    assert [e["step"] for e in waited.events.of("save_end")] == [10] and saver.pending is None


def save_group(monkeypatch, loop):
    """The process group each async_save of `loop`'s saver was dispatched on (None: the training's default group)."""
    groups, save = [], dcp.async_save

    def spy(*args, **kwargs):
        groups.append(kwargs.get("process_group"))
        return save(*args, **kwargs)
    monkeypatch.setattr(dcp, "async_save", spy)
    saver = AsyncSaver(loop)
    saver.save(0, 10, weights(1))
    saver.end()
    return groups


@pytest.mark.parametrize("fix, fault, own", [
    ("durable", "shared_group", True), ("own_group", "shared_group", True),
    ("in_place", "shared_group", False), ("on_durable", "shared_group", False), ("fresh_rename", "shared_group", False),
    ("in_place", None, True), ("durable", None, True)])
def test_the_save_goes_on_a_group_of_its_own_unless_the_scenario_shares_the_trainings_and_no_fix_of_its_own_holds(
        tmp_path, rank, monkeypatch, fix, fault, own):
    """fault.async_fault=shared_group puts the save's collectives on the training's group; own_group and durable
    (all three fixes at once) give it a group of its own even there."""
    groups = save_group(monkeypatch, Loop(tmp_path / "m", fix, fault))
    assert len(groups) == 1
    if own:
        assert groups[0] is not None and groups[0] != dist.group.WORLD
    else:
        assert groups[0] is None


def test_the_cleanup_keeps_the_newest_up_to_the_published_one_and_never_a_save_already_dispatched():
    folders = [Path(f"m/epoch{k}") for k in (0, 1, 2, 3)]
    assert outdated(folders, Path("m/epoch2"), 1) == [Path("m/epoch0"), Path("m/epoch1")]
    assert outdated(folders, Path("m/epoch2"), 2) == [Path("m/epoch0")]
    assert outdated(folders[:2], Path("m/epoch2"), 1) == [Path("m/epoch0"), Path("m/epoch1")]  # not yet listed
    assert outdated(folders, Path("m/epoch0"), 1) == []
    assert outdated([Path("m/epoch9"), Path("m/epoch10")], Path("m/epoch10"), 1) == [Path("m/epoch9")]  # by epoch


@pytest.mark.parametrize("fix", ["in_place", "on_durable"])
def test_each_save_names_its_checkpoint_and_removes_the_older_ones_past_keep_last(tmp_path, rank, fix):
    loop = Loop(tmp_path / "m", fix, keep=1)
    saver = AsyncSaver(loop)
    for epoch in (0, 1, 2):
        saver.save(epoch, 10 * (epoch + 1), weights(epoch))
    saver.end()
    assert loop.pointer() == "epoch2" and loop.deleted == ["epoch0", "epoch1"]
    assert [p.name for p in loop.checkpoints()] == ["epoch2"]
    assert [e["step"] for e in loop.events.of("save_end")] == [10, 20, 30]
    assert [e["step"] for e in loop.events.of("save_dispatch")] == [10, 20, 30]
    quiet = Loop(tmp_path / "q", fix, pointer=False)
    saver = AsyncSaver(quiet)
    saver.save(0, 10, weights(0))
    saver.end()
    assert quiet.pointer() is None and quiet.deleted == [] and [p.name for p in quiet.checkpoints()] == ["epoch0"]


def test_overlap_dispatches_each_save_before_the_last_is_durable_and_on_durable_waits_for_each_first(tmp_path, rank):
    naive = Loop(tmp_path / "n", "in_place", "overlap")
    saver = AsyncSaver(naive)
    saver.save(0, 10, weights(0))
    saver.save(1, 20, weights(1))
    assert [p["step"] for p in saver.earlier] == [10] and saver.pending["step"] == 20
    assert naive.events.of("save_end") == []  # neither waited for yet
    saver.end()
    assert [e["step"] for e in naive.events.of("save_end")] == [10, 20] and saver.earlier == []
    fixed = Loop(tmp_path / "f", "on_durable", "overlap")
    saver = AsyncSaver(fixed)
    saver.save(0, 10, weights(0))
    saver.save(1, 20, weights(1))
    assert saver.earlier == [] and [e["step"] for e in fixed.events.of("save_end")] == [10]  # waited before the next
    saver.end()
    assert [e["step"] for e in fixed.events.of("save_end")] == [10, 20]


@pytest.mark.parametrize("fix", ["fresh_rename", "durable"])
def test_a_save_over_the_one_folder_goes_to_a_fresh_folder_renamed_into_place_and_reads_back_whole(
        tmp_path, rank, monkeypatch, fix):
    """fault.async_fault=overwrite: every save into m/last. fresh_rename (and durable there) write .last.incoming and
    rename it into place once durable, each barrier (before the write, the completion's) on the save's group; a
    resume lists m/last (and m/last.old mid-rename) and reads each shard back with the digest its write had."""
    groups, barrier = [], dist.barrier

    def spy(*args, **kwargs):
        groups.append(kwargs.get("group"))
        return barrier(*args, **kwargs)
    monkeypatch.setattr(dist, "barrier", spy)
    loop = Loop(tmp_path / "m", fix, "overwrite")
    saver = AsyncSaver(loop)
    saver.save(0, 10, weights(0))
    saver.save(1, 20, weights(1))
    saver.end()
    last = tmp_path / "m" / "last"
    assert groups == [saver.group] * 4 and saver.group is not None
    assert [e["path"] for e in loop.events.of("save_commit")] == [str(tmp_path / "m" / ".last.incoming")] * 2
    assert [e["path"] for e in loop.events.of("save_dispatch")] == [str(last)] * 2
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["last", "latest"]
    assert saver.listed(["ignored"]) == [last]
    (tmp_path / "m" / "last.old").mkdir()
    assert saver.listed([]) == [tmp_path / "m" / "last.old", last]
    state = {"model": weights(7), "epoch": torch.tensor(-1), "step": torch.tensor(0)}
    saver.load(state, last)
    assert int(state["step"]) == 20 and float(state["model"]["w"][0]) == 1.0
    reads = loop.events.of("shard_read")
    writes = {e["step"]: e["digest"] for e in loop.events.of("shard_write")}
    assert [(e["step"], e["shard"], e["path"]) for e in reads] == [(20, 0, str(last))]
    assert reads[0]["digest"] == writes[20] != writes[10]


def test_a_save_in_place_over_the_one_folder_writes_there_and_other_listings_are_dcps(tmp_path, rank):
    """keep_last deletes nothing there: the one folder is no epoch<k>."""
    loop = Loop(tmp_path / "m", "in_place", "overwrite", keep=1)
    saver = AsyncSaver(loop)
    saver.save(0, 10, weights(0))
    saver.end()
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["last", "latest"] and loop.deleted == []
    assert AsyncSaver(Loop(tmp_path / "e", "in_place")).listed(["a", "b"]) == ["a", "b"]


class Failed:
    """A save's Future that raised."""

    def __init__(self, error):
        self.error = error

    def exception(self):
        return self.error

    def result(self):
        raise self.error


def test_a_save_that_raised_is_recorded_whether_or_not_the_loop_waits_and_a_failed_wait_is_a_train_error(
        tmp_path, rank):
    loop = Loop(tmp_path / "m", "in_place")
    saver = AsyncSaver(loop)
    saver.failed(Failed(OSError("No space left on device\nmore")), 2, 30)
    saver.failed(Failed(RuntimeError("")), 1, 20)
    saver.failed(Failed(None), 0, 10)  # a save that returned: nothing to record
    saver.failed(Failed(OSError("x" * 400)), 4, 50)  # its message cut at 300 characters
    assert [(e["epoch"], e["step"], e["error_type"], e["message"]) for e in loop.events.of("async_save_error")] == \
        [(2, 30, "OSError", "No space left on device"), (1, 20, "RuntimeError", ""), (4, 50, "OSError", "x" * 300)]
    from train.fixes import CheckpointFailed
    saver.pending = {"future": Failed(CheckpointFailed(RuntimeError("rank 1 failed\ntrace"))), "epoch": 3, "step": 40,
                     "path": tmp_path / "m" / "epoch3"}
    with pytest.raises(CheckpointFailed):
        saver.wait()
    assert loop.events.of("train_error") == [{"event": "train_error", "epoch": 3, "error_type": "CheckpointException",
                                              "message": "rank 1 failed", "timed_out": False}]
    assert loop.events.of("save_end") == []


def test_a_checkpoint_whose_shard_was_cut_short_fails_to_load_as_a_checkpoint_failure(tmp_path, rank):
    from train.fixes import CheckpointFailed
    loop = Loop(tmp_path / "m", "in_place")
    saver = AsyncSaver(loop)
    saver.save(0, 10, weights(0))
    saver.end()
    shard = next((tmp_path / "m" / "epoch0").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:10])
    with pytest.raises(CheckpointFailed):
        saver.load({"model": weights(7), "epoch": torch.tensor(-1), "step": torch.tensor(0)}, tmp_path / "m" / "epoch0")
    assert loop.events.of("shard_read") == []


def test_a_fresh_save_whose_barrier_failed_dispatches_nothing_and_leaves_no_stale_incoming_folder(
        tmp_path, rank, monkeypatch):
    """fresh_rename clears what a crashed attempt left in .last.incoming, then a barrier: when the barrier fails the
    save is not dispatched (SyncFailed, the failure recorded)."""
    from train.fixes import SyncFailed
    loop = Loop(tmp_path / "m", "fresh_rename", "overwrite")
    saver = AsyncSaver(loop)
    left = tmp_path / "m" / ".last.incoming"
    (left / "half").mkdir(parents=True)

    def broken(*args, **kwargs):
        raise RuntimeError("Connection closed by peer")
    monkeypatch.setattr(dist, "barrier", broken)
    with pytest.raises(SyncFailed):
        saver.save(0, 10, weights(0))
    assert not left.exists() and loop.events.of("save_dispatch") == [] and saver.pending is None
    assert [(e["event"], e["how"]) for e in loop.events.recorded] == [("sync_enter", "barrier"),
                                                                      ("sync_error", "barrier")]


def durable(saver):
    """Block until the pending save's Future resolved and ran the saver's callbacks (ours runs after them)."""
    done = threading.Event()
    saver.pending["future"].add_done_callback(lambda f: done.set())
    assert done.wait(20)


def expected_digest(named: dict) -> str:
    """The shard records' digest: sha256 over each tensor's name and bytes, in name order, its first 16 hex."""
    h = hashlib.sha256()
    for name in sorted(named):
        h.update(name.encode())
        h.update(named[name].numpy().tobytes())
    return h.hexdigest()[:16]


def test_a_save_records_its_dispatch_shard_commit_and_end_and_calls_each_fault_point_with_its_epoch(
        tmp_path, rank, monkeypatch):
    """One save, in place: save_dispatch, shard_write (the shard's digest), save_commit, save_end (when dispatched and
    when durable); the fault points called with the save's epoch, rank and path, the save's stage published at each."""
    loop = Loop(tmp_path / "m", "in_place")
    saver = AsyncSaver(loop)
    loop.faults.saver = saver
    stages, save = [], dcp.async_save

    def spy(*args, **kwargs):
        stages.append(saver.stage)
        return save(*args, **kwargs)
    monkeypatch.setattr(dcp, "async_save", spy)
    saver.save(3, 30, weights(1))
    durable(saver)
    assert stages == ["staging"] and saver.stage == "commit"  # written, not yet waited for
    saver.end()
    assert saver.stage is None and saver.waiting is None
    path = str(tmp_path / "m" / "epoch3")
    end = loop.events.recorded[-1]
    assert isinstance(end.pop("dispatched_t"), float) and isinstance(end.pop("durable_t"), float)
    digest = expected_digest({"model.w": weights(1)["w"], "epoch": torch.tensor(3), "step": torch.tensor(30)})
    assert loop.events.recorded == [
        {"event": "save_dispatch", "epoch": 3, "step": 30, "path": path, "commits": True},
        {"event": "shard_write", "step": 30, "shard": 0, "digest": digest},
        {"event": "save_commit", "epoch": 3, "step": 30, "path": path},
        {"event": "save_end", "epoch": 3, "step": 30, "path": path, "digest": "w4"}]
    assert loop.faults.of_thread(save_thread=False) == [("async_dispatched", 3, tmp_path / "m" / "epoch3"),
                                                        ("async_awaited", 3)]
    assert loop.faults.of_thread(save_thread=True) == [("async_before_shard", 3, 0, "plan"),
                                                       ("async_after_shard", 3, 0, "plan")]


def test_a_save_whose_write_raised_is_recorded_with_its_epoch_and_step_when_its_future_resolves(tmp_path, rank):
    loop = Loop(tmp_path / "m", "in_place")
    loop.faults.fail_shard = OSError("No space left on device")
    saver = AsyncSaver(loop)
    saver.save(2, 30, weights(1))
    durable(saver)  # not waited for by the loop: the callback records it
    assert [(e["epoch"], e["step"], e["error_type"]) for e in loop.events.of("async_save_error")] == \
        [(2, 30, "CheckpointException")]
    assert saver.pending["future"].exception() is not None
    saver.pending = None


class SharedStore:
    """hang.store's stand-in: an in-memory store every clone of which is itself; once closed it raises, as a store
    whose process group is gone does (the watcher then returns)."""

    def __init__(self):
        self.store, self.closed = dist.HashStore(), False

    def clone(self):
        return self

    def set(self, key, value):
        if self.closed:
            raise RuntimeError("store closed")
        self.store.set(key, value)

    def get(self, key):
        return self.store.get(key)

    def check(self, keys):
        return self.store.check(keys)


def test_the_hang_watcher_runs_only_where_two_threads_share_a_group_and_sees_a_save_in_flight_while_awaited(
        tmp_path, rank, monkeypatch):
    """A daemon thread, async-save-watch, watches the shared group and overlap (no fix there): while the loop waits
    for a save's Future, the save is in flight and this rank's stillness grows on the store."""
    for n, (fix, fault, watched) in enumerate([
            ("in_place", "shared_group", True), ("in_place", "overlap", True), ("own_group", "shared_group", False),
            ("on_durable", "overlap", False), ("in_place", None, False)]):
        watcher = AsyncSaver(Loop(tmp_path / str(n), fix, fault)).watcher
        assert (watcher is not None) == watched, (fix, fault)
        if watched:
            assert watcher.daemon and watcher.name == "async-save-watch"
    store = SharedStore()
    monkeypatch.setattr(async_save.hang, "store", lambda: store)
    monkeypatch.setattr(async_save, "POLL_S", 0.01)
    monkeypatch.setattr(async_save, "STALL_S", float("inf"))  # never named a hang here
    loop = Loop(tmp_path / "o", "in_place", "overlap")
    saver = AsyncSaver(loop)
    seen = []

    def awaited(epoch):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not seen:
            if store.check(["race-lab/async/0"]) and json.loads(store.get("race-lab/async/0"))["still_s"] > 0:
                seen.append(epoch)
            time.sleep(0.01)
    loop.faults.async_awaited = awaited
    try:
        saver.save(0, 10, weights(0))
        saver.end()
    finally:
        store.closed = True
        saver.watcher.join(5)
    assert seen == [0] and not saver.watcher.is_alive()
