"""The resume loop's async saver (train/frameworks/torch_loop/async_save.py) on one real gloo rank in this process,
with real dcp.async_save writes into tmp_path and a stand-in for the loop around it (its folder, pointer and
cleanup): what each fix changes, one difference each (issue 43; the slow tier runs the same with two ranks and the
faults). Where the saver waits for a pending save at exit, and which process group its collectives go on."""
import re
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from helpers.gloo import one_rank
from train.frameworks.torch_loop import async_save
from train.frameworks.torch_loop.async_save import AsyncSaver, outdated
from helpers.recorded import Events


class NoFaults:
    """No fault planted: each of the saver's fault points does nothing."""

    def async_before_shard(self, epoch, rank):
        pass

    def async_after_shard(self, epoch, rank):
        pass

    def async_dispatched(self, epoch, path):
        pass

    def async_awaited(self, epoch):
        pass


class Loop:
    """What the saver uses of the resume loop (train/frameworks/torch_loop/resume.py): the folder, `latest` (the
    pointer), the epoch<k> folders oldest first, their deletion, and a weights digest."""

    def __init__(self, folder: Path, fix: str, fault=None, keep=0, pointer=True):
        self.cfg = {"fix": {"name": fix}, "fault": {"async_fault": fault}}
        self.folder, self.keep, self.use_pointer = folder, keep, pointer
        self.events, self.faults, self.deleted = Events(), NoFaults(), []
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
        tmp_path, rank):
    loop = Loop(tmp_path / "m", "in_place", "exit_pending")
    saver = AsyncSaver(loop)
    saver.save(0, 10, weights(1))
    assert loop.pointer() == "epoch0"  # named at once, at dispatch
    saver.end()
    assert saver.pending is not None and loop.events.of("save_end") == []  # never waited for
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
        tmp_path, rank, fix):
    """fault.async_fault=overwrite: every save into m/last. fresh_rename (and durable there) write .last.incoming and
    rename it into place once durable; a resume lists m/last (and m/last.old mid-rename) and reads each shard back
    with the digest its write had."""
    loop = Loop(tmp_path / "m", fix, "overwrite")
    saver = AsyncSaver(loop)
    saver.save(0, 10, weights(0))
    saver.save(1, 20, weights(1))
    saver.end()
    last = tmp_path / "m" / "last"
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
    loop = Loop(tmp_path / "m", "in_place", "overwrite")
    saver = AsyncSaver(loop)
    saver.save(0, 10, weights(0))
    saver.end()
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["last", "latest"]
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
    assert [(e["epoch"], e["step"], e["error_type"], e["message"]) for e in loop.events.of("async_save_error")] == \
        [(2, 30, "OSError", "No space left on device"), (1, 20, "RuntimeError", "")]
    from train.fixes import CheckpointFailed
    saver.pending = {"future": Failed(CheckpointFailed(RuntimeError("rank 1 failed\ntrace"))), "epoch": 3, "step": 40,
                     "path": tmp_path / "m" / "epoch3"}
    with pytest.raises(CheckpointFailed):
        saver.wait()
    assert [(e["epoch"], e["error_type"], e["message"]) for e in loop.events.of("train_error")] == \
        [(3, "CheckpointException", "rank 1 failed")]
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
