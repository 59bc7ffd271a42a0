"""train/fixes.py's rules over files, and its syncs on one real gloo rank (a failed sync raises SyncFailed, recorded;
what only rank 0 does is done): the atomic write, the completeness marker, the manifest's tag, a checkpoint's
removal, the rename into place, the async completion steps, dcp's safe read. Two ranks: test_fixes_two_ranks.py."""
import json
import os
import pickle
import struct
import threading

import pytest
import torch
import torch.distributed as dist

from helpers.gloo import one_rank
from helpers.recorded import Events
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException

from train.fixes import (CheckpointFailed, SyncFailed, agreed_tag, atomic_write, complete_when_durable, dcp_load,
                         dcp_save, fresh_folder, group_of_its_own, is_complete, manifest_tag, marker_of,
                         publish_manifest_last, rank0_decides, remove_checkpoint, remove_when_durable,
                         rename_into_place, safe_dcp_reader, wait_for_file, watched, write_marker)


def test_an_atomic_write_leaves_the_whole_file_or_what_was_there_and_no_temporary_file(tmp_path):
    path = tmp_path / "new" / "deeper" / "best.pt"  # folders not there yet are made, the parents too
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
    later = threading.Timer(0.2, (tmp_path / "later").touch)  # written by a peer while this rank polls
    later.start()
    try:
        assert wait_for_file(tmp_path / "later", 30) is True
    finally:
        later.join()


def test_a_watched_wait_is_true_unless_it_returned_false_or_raised_which_is_recorded_and_said(tmp_path, capsys):
    (tmp_path / "there").touch()
    events = Events()
    assert watched(events, "file", lambda: wait_for_file(tmp_path / "there", 1)) is True
    assert watched(events, "writes", lambda: None) is True  # a barrier returns None
    assert watched(events, "writes", lambda: False) is False
    with one_rank(tmp_path):
        assert watched(events, "barrier", broken) is False
    assert events.recorded == [
        {"event": "sync_enter", "how": "file"}, {"event": "sync_exit", "how": "file"},
        {"event": "sync_enter", "how": "writes"}, {"event": "sync_exit", "how": "writes"},
        {"event": "sync_enter", "how": "writes"}, {"event": "sync_exit", "how": "writes"},
        {"event": "sync_enter", "how": "barrier"},
        {"event": "sync_error", "how": "barrier", "error_type": "RuntimeError", "message": "Connection closed by peer",
         "timed_out": False, "in_reader": False}]
    assert capsys.readouterr().out.endswith(" rank 0: barrier failed: RuntimeError: Connection closed by peer\n")


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
        (tmp_path / "last.old").mkdir(exist_ok=True)  # a crash mid-rename left it, whole
        (tmp_path / "last.old" / "step").write_text("5")
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
        assert events.syncs() == [("sync_enter", "agree"), ("sync_exit", "agree"),
                                  ("sync_enter", "barrier"), ("sync_exit", "barrier")]
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


def test_the_saves_group_is_gloo_of_its_own_whatever_backend_the_default_group_names(tmp_path):
    """Training's group may name a backend per device (cpu:gloo,cuda:nccl on GPUs; cuda:gloo here, where there
    are none): the save's group is plain gloo, not a copy of the default's."""
    dist.init_process_group("cpu:gloo,cuda:gloo", init_method=f"file://{tmp_path / 'store-1'}", rank=0,
                            world_size=1)
    try:
        group = group_of_its_own()
        assert dist.get_backend(group) == "gloo" and dist.get_backend() == "cpu:gloo,cuda:gloo"
    finally:
        dist.destroy_process_group()


def test_dcp_passes_its_options_on_to_save_and_load(tmp_path):
    """use_collectives=False writes the rank's own __0.metadata, which the safe reader reads back; a load planner's
    allow_partial_load leaves a key the checkpoint lacks as it was."""
    with one_rank(tmp_path):
        dcp_save({"w": torch.arange(4.0)}, tmp_path / "own", use_collectives=False)
        assert sorted(p.name for p in (tmp_path / "own").iterdir()) == ["__0.metadata", "__0_0.distcp"]
        state = {"w": torch.zeros(4)}
        dcp_load(state, tmp_path / "own")
        assert state["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
        state = {"w": torch.zeros(4), "extra": torch.full((1,), 7.0)}
        dcp_load(state, tmp_path / "own", planner=DefaultLoadPlanner(allow_partial_load=True))
        assert state["w"].tolist() == [0.0, 1.0, 2.0, 3.0] and state["extra"].tolist() == [7.0]


def test_the_safe_reader_reads_the_metadata_torchs_own_reader_reads(tmp_path):
    with one_rank(tmp_path):
        dcp_save({"w": torch.arange(4.0)}, tmp_path / "ckpt")
    safe, own = safe_dcp_reader(tmp_path / "ckpt"), FileSystemReader(tmp_path / "ckpt")
    mine, torchs = safe.read_metadata(), own.read_metadata()
    assert mine.state_dict_metadata == torchs.state_dict_metadata
    assert mine.storage_meta.load_id == safe.load_id and torchs.storage_meta.load_id == own.load_id


def calls(module, name, *arg_lists):
    """Pickle bytes that, unpickled, look up `module`.`name` and call it with arg_lists[0], then call what it
    returned with arg_lists[1], ...: what a crafted .metadata can hold (protocol 4 resolves dotted names)."""
    def text(value):
        data = value.encode()
        return b"X" + struct.pack("<I", len(data)) + data
    out = b"\x80\x04" + text(module) + text(name) + b"\x93"
    for args in arg_lists:
        out += b"(" + b"".join(text(a) for a in args) + b"tR"
    return out + b"."


def test_the_safe_reader_refuses_any_torch_global_but_a_dtype_and_any_name_but_a_class_of_dcps_metadata(tmp_path):
    """Each refusal names the global, and dcp's per-rank failure carries it; nothing of the file ran."""
    ran = tmp_path / "ran"
    crafted = {
        "torch.save": calls("torch", "save", ["x", str(ran)]),
        "torch.distributed.checkpoint.metadata.__builtins__.get": calls(
            "torch.distributed.checkpoint.metadata", "__builtins__.get", ["eval"],
            [f"__import__('os').mkdir({str(ran)!r})"]),
        # a dotted name reaches what the module imported (its `os`): only a class dcp defines there is loaded
        "torch.distributed.checkpoint.metadata.os.mkdir": calls("torch.distributed.checkpoint.metadata", "os.mkdir",
                                                                [str(ran)]),
        # a class of another module, named by its own module
        "subprocess.Popen": calls("subprocess", "Popen", ["true"]),
        # a class the module imported (enum's Enum), not one it defines
        "torch.distributed.checkpoint.metadata.Enum": calls("torch.distributed.checkpoint.metadata", "Enum",
                                                            ["Ran", "yes"]),
    }
    with one_rank(tmp_path):
        dcp_save({"w": torch.arange(4.0)}, tmp_path / "ckpt")
        for refused, data in crafted.items():
            (tmp_path / "ckpt" / ".metadata").write_bytes(data)
            with pytest.raises(CheckpointFailed) as failed:
                dcp_load({"w": torch.zeros(4)}, tmp_path / "ckpt")
            assert str(failed.value) == "CheckpointException ranks:dict_keys([0])"
            assert list(failed.value.failures) == [0]
            raised, _ = failed.value.failures[0]
            assert str(raised).split("; ")[:2] == [
                "metadata is None",
                f"global metadata read failed: {refused} is not something dcp writes in .metadata: not loaded"]
            assert not ran.exists()


def test_a_checkpoint_failure_is_named_by_its_first_line_or_else_its_type_with_each_ranks_failure():
    failure = (OSError("disk full"), None)
    named = CheckpointFailed(CheckpointException("save failed", {1: failure}))
    assert str(named) == "CheckpointException ranks:dict_keys([1])" and named.failures == {1: failure}
    unnamed = CheckpointFailed(ValueError(""))  # no message, no failures
    assert str(unnamed) == "ValueError" and unnamed.failures == {}
