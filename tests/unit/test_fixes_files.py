"""train/fixes.py's rules over files, and its syncs on one real gloo rank (a failed sync raises SyncFailed, recorded;
what only rank 0 does is done): the atomic write, the completeness marker, the manifest's tag, a checkpoint's
removal, the rename into place, the async completion steps, dcp's safe read. Two ranks: test_fixes_two_ranks.py."""
import json
import os
import pickle

import pytest
import torch
import torch.distributed as dist

from helpers.gloo import one_rank
from helpers.recorded import Events
from train.fixes import (CheckpointFailed, SyncFailed, agreed_tag, atomic_write, complete_when_durable, dcp_load,
                         dcp_save, fresh_folder, is_complete, manifest_tag, marker_of, publish_manifest_last,
                         rank0_decides, remove_checkpoint, remove_when_durable, rename_into_place, wait_for_file,
                         write_marker)


def test_an_atomic_write_leaves_the_whole_file_or_what_was_there_and_no_temporary_file(tmp_path):
    path = tmp_path / "new" / "best.pt"
    atomic_write(path, lambda f: f.write(b"first"))
    assert path.read_bytes() == b"first"

    def half(f):
        f.write(b"half")
        raise OSError("No space left on device")
    with pytest.raises(OSError):
        atomic_write(path, half)
    assert path.read_bytes() == b"first" and sorted(p.name for p in path.parent.iterdir()) == ["best.pt"]


def test_wait_for_file_returns_once_it_is_there_and_raises_a_timeout_when_it_never_comes(tmp_path):
    (tmp_path / "there").touch()
    assert wait_for_file(tmp_path / "there", 0.1) is True
    with pytest.raises(TimeoutError, match=r"no never after 0.1 s \(timed out\)"):
        wait_for_file(tmp_path / "never", 0.1)


def test_a_marker_vouches_for_its_bytes_and_a_missing_or_broken_marker_for_nothing(tmp_path):
    path = tmp_path / "epoch1.pt"
    path.write_bytes(b"weights")
    assert not is_complete(path) and marker_of(path) == tmp_path / "epoch1.pt.complete"
    write_marker(path, b"weights", step=20, digest="w20")
    assert is_complete(path)
    assert json.loads(marker_of(path).read_text())["step"] == 20
    for broken in ("{", "[]", '{"step": 20}', '{"sha256": 7}'):
        marker_of(path).write_text(broken)
        assert not is_complete(path), broken
    write_marker(tmp_path / "gone.pt", b"weights")
    assert not is_complete(tmp_path / "gone.pt")  # a marker with no file


def test_a_checkpoint_is_removed_marker_first_and_a_path_already_gone_raises(tmp_path):
    path = tmp_path / "epoch1.pt"
    path.write_bytes(b"w")
    write_marker(path, b"w")
    remove_checkpoint(path)
    assert list(tmp_path.iterdir()) == []
    folder = tmp_path / "epoch2"
    (folder / "sub").mkdir(parents=True)
    remove_checkpoint(folder)
    assert not folder.exists()
    with pytest.raises(FileNotFoundError):
        remove_checkpoint(tmp_path / "epoch3.pt")


def test_the_manifest_names_a_tag_only_for_the_run_that_wrote_it(tmp_path):
    manifest = tmp_path / "manifest.json"
    assert manifest_tag(manifest, "run-a") is None  # none there
    manifest.write_text(json.dumps({"run": "run-a", "tag": "global_step20"}))
    assert manifest_tag(manifest, "run-a") == "global_step20"
    assert manifest_tag(manifest, "run-b") is None
    for other in ("{not json", '["run-a"]', '{"tag": "global_step20"}'):
        manifest.write_text(other)
        assert manifest_tag(manifest, "run-a") is None, other


def test_a_fresh_folder_is_renamed_into_place_and_the_old_one_goes(tmp_path):
    path = tmp_path / "last"
    assert fresh_folder(path) == tmp_path / ".last.incoming"
    for step in ("10", "20"):
        incoming = fresh_folder(path)
        incoming.mkdir()
        (incoming / "step").write_text(step)
        (tmp_path / "last.old").mkdir(exist_ok=True)  # a crash mid-rename left it
        rename_into_place(incoming, path)
        assert (path / "step").read_text() == step
        assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]


def test_a_removal_under_async_io_waits_for_the_writes_and_keeps_the_old_one_when_a_write_failed(tmp_path):
    with one_rank(tmp_path):
        done, events = [], Events()
        remove_when_durable(events, lambda: done.append("waited"), lambda: done.append("removed"))
        assert done == ["waited", "removed"]
        assert events.syncs() == [("sync_enter", "writes"), ("sync_exit", "writes")]

        def failed():
            raise OSError("write failed")
        events = Events()
        with pytest.raises(SyncFailed):
            remove_when_durable(events, failed, lambda: done.append("removed again"))
        assert done == ["waited", "removed"]
        assert [(e["event"], e.get("error_type")) for e in events.recorded] == [("sync_enter", None),
                                                                                 ("sync_error", "OSError")]


class Pending:
    def __init__(self, done):
        self.done = done

    def result(self):
        self.done.append("durable")


def broken(*args, **kwargs):
    raise RuntimeError("Connection closed by peer")


def test_the_completion_step_publishes_after_the_future_and_a_barrier_and_not_when_the_barrier_failed(
        tmp_path, monkeypatch):
    with one_rank(tmp_path):
        done, events = [], Events()
        complete_when_durable(events, Pending(done), None, lambda: done.append("published"))
        assert done == ["durable", "published"]
        assert events.syncs() == [("sync_enter", "barrier"), ("sync_exit", "barrier")]
        monkeypatch.setattr(dist, "barrier", broken)
        done, events = [], Events()
        with pytest.raises(SyncFailed):
            complete_when_durable(events, Pending(done), None, lambda: done.append("published"))
        assert done == ["durable"] and events.syncs() == [("sync_enter", "barrier"), ("sync_error", "barrier")]


def test_rank_0s_syncs_raise_sync_failed_when_their_collective_failed(tmp_path, monkeypatch):
    with one_rank(tmp_path):
        events = Events()
        assert rank0_decides(events, lambda: "epoch2") == "epoch2"
        publish_manifest_last(events, tmp_path / "latest", tmp_path / "manifest.json", "global_step20", "run-a",
                              step=20)
        assert (tmp_path / "latest").read_text() == "global_step20"
        assert json.loads((tmp_path / "manifest.json").read_text()) == {"run": "run-a", "tag": "global_step20",
                                                                       "step": 20}
        assert agreed_tag(events, lambda: [], lambda t: True) is None
        monkeypatch.setattr(dist, "all_reduce", broken)
        with pytest.raises(SyncFailed):
            agreed_tag(events, lambda: ["global_step20"], lambda t: True)
        monkeypatch.setattr(dist, "barrier", broken)
        with pytest.raises(SyncFailed):
            publish_manifest_last(events, tmp_path / "l2", tmp_path / "m2.json", "global_step30", "run-a")
        assert not (tmp_path / "l2").exists() and not (tmp_path / "m2.json").exists()
        monkeypatch.setattr(dist, "broadcast_object_list", broken)
        with pytest.raises(SyncFailed):
            rank0_decides(events, lambda: "epoch2")


class Crafted:
    """Unpickled, it makes the folder `path`: what a crafted .metadata could run on every rank."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return os.mkdir, (str(self.path),)


def test_dcp_saves_and_loads_through_the_safe_reader_which_refuses_foreign_code_in_its_metadata(tmp_path):
    with one_rank(tmp_path):
        dcp_save({"w": torch.arange(4.0)}, tmp_path / "ckpt")
        state = {"w": torch.zeros(4)}
        dcp_load(state, tmp_path / "ckpt")
        assert state["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
        crafted = tmp_path / "crafted"
        dcp_save({"w": torch.arange(4.0)}, crafted)
        (crafted / ".metadata").write_bytes(pickle.dumps(Crafted(tmp_path / "ran")))  # code dcp never writes there
        with pytest.raises(CheckpointFailed):
            dcp_load({"w": torch.zeros(4)}, crafted)
        assert not (tmp_path / "ran").exists()  # refused before it ran
        with pytest.raises(CheckpointFailed):
            dcp_load({"w": torch.zeros(4)}, tmp_path / "missing")
