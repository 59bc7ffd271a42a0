"""framework=accelerate with real gloo ranks (world_size=2): Accelerate's own save_state / load_state, as shipped
and with its documented fixes, in the cells that tell them apart.

- seed: rank 0 is late at the last save_state. Without accelerator.wait_for_everyone() (as_shipped) rank 1's
  load_state reads the previous epoch's model.safetensors, silently (every process exits 0); with it, clean.
  With real accuracy the digits reach their best in epoch 0 and the last epoch saves nothing, so these runs
  set fault.best_epoch=-1 (every epoch improves, each save holds other weights).
- no_shared_fs: each node has its own disk; as shipped, node 1 finds no model file (missing); with
  ProjectConfiguration(save_on_each_node=True) each node writes its own copy: clean.
- save_fails: rank 0's last save raises ENOSPC halfway through the file; as shipped not clean, and the run ends by
  itself with no process left; agreed: every rank agrees not to load (save_failed); atomic: the failed save leaves
  the older file whole, and a run in which a save failed is never clean (rank 1 read before it began: stale).
The groups run side by side, each one Hydra multirun (its later jobs fork from a warm forkserver); no_shared_fs,
whose two node agents each start their own processes, is marked slow.
"""
from pathlib import Path

import pytest

from conftest import sweep_groups

pytestmark = pytest.mark.slow  # Accelerate as shipped and with fixes: real-rank sweeps (make test-fast leaves them out; CI runs them)


ENDS_WITHIN_S = 300  # the groups one fixture starts, together; each takes well under a minute on 2 idle cores

GROUPS = {
    "seed": ["scenario=seed", "fix=as_shipped,wait_for_everyone,barrier"],
    "no_shared_fs": ["scenario=no_shared_fs", "fix=as_shipped,save_on_each_node"],
    "save_fails": ["scenario=save_fails", "fix=as_shipped,agreed,atomic"],
}


def run_side_by_side(root: Path, groups: dict) -> dict:
    """Start every group's multirun at once, wait for all; name -> conftest's Launch."""
    return sweep_groups(root, groups, "world_size=2", "framework=accelerate", deadline_s=ENDS_WITHIN_S)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    return run_side_by_side(tmp_path_factory.mktemp("accelerate"), {k: GROUPS[k] for k in ("seed", "save_fails")})


@pytest.fixture(scope="module")
def node_local(tmp_path_factory):
    """Two node agents, each starting its own processes: about a minute on 2 busy cores (slow)."""
    root = tmp_path_factory.mktemp("accelerate_nodes")
    return run_side_by_side(root, {"no_shared_fs": GROUPS["no_shared_fs"]})["no_shared_fs"]


def events_of(summary) -> list:
    from train.events import read_events
    return read_events(summary["run_dir"])


def of(events, name, rank=None) -> list:
    return [e for e in events if e["event"] == name and (rank is None or e["rank"] == rank)]


def test_as_shipped_rank_1_silently_loads_the_previous_save(runs):
    group = runs["seed"]
    s = group.cell("as_shipped")
    assert group.rc == 0, group.out[-3000:]  # silently: no rank failed, no error anywhere
    assert (s["status"], s["verdict"], [r["outcome"] for r in s["ranks"]]) == ("ok", "race", ["loaded", "stale"])
    assert s["ranks"][1]["detail"] == "loaded the epoch-1 save"
    assert "rank 1 loaded an older checkpoint (the epoch-1 save)" in s["explanation"]
    assert "before rank 0 finished saving" in s["explanation"] and s["replicas"] == "diverged"
    events = events_of(s)
    saves = {e["epoch"]: e for e in of(events, "save_end", 0)}
    assert sorted(saves) == [0, 1, 2]  # every epoch improved, rank 0 wrote each
    assert of(events, "load_done", 1)[0]["digest"] == saves[1]["digest"] != saves[2]["digest"]
    assert of(events, "load_done", 0)[0]["digest"] == saves[2]["digest"]
    assert of(events, "load_attempt", 1)[0]["t"] < saves[2]["t"]  # it read before the last save had ended
    assert not of(events, "load_error") and not of(events, "sync_enter")  # no error, and nothing waited


def test_wait_for_everyone_holds_the_seed(runs):
    s = runs["seed"].cell("wait_for_everyone")
    assert (s["verdict"], [r["outcome"] for r in s["ranks"]]) == ("clean", ["loaded", "loaded"]), s["explanation"]
    assert s["explanation"].startswith("clean: every rank loaded the last checkpoint rank 0 wrote")
    assert "rank 0 was 3.0 s late at its last save" in s["explanation"]
    events = events_of(s)
    last_save = of(events, "save_end", 0)[-1]
    assert last_save["epoch"] == 2 and {r["final_digest"] for r in s["ranks"]} == {last_save["digest"]}
    assert {e["rank"] for e in of(events, "sync_exit") if e["how"] == "barrier"} == {0, 1}
    assert of(events, "load_attempt", 1)[0]["t"] >= last_save["t"]  # it read once the save had ended


def test_a_fastai_fix_is_not_applicable(runs):
    s = runs["seed"].cell("barrier")
    assert (s["status"], s["verdict"], s["ranks"]) == ("n/a", "n/a", [])
    assert "accelerate's own barrier is fix=wait_for_everyone" in s["explanation"]


@pytest.mark.slow
def test_without_a_shared_filesystem_node_1_has_no_file_unless_each_node_saves(node_local):
    group = node_local
    shipped, each = group.cell("as_shipped"), group.cell("save_on_each_node")
    assert group.rc == 0, group.out[-3000:]
    assert {shipped["node_disk"], each["node_disk"]} == {"mount"}  # each node's agent had its own tmpfs
    assert (shipped["verdict"], [r["outcome"] for r in shipped["ranks"]]) == ("race", ["loaded", "missing"])
    assert shipped["ranks"][1]["detail"].startswith("FileNotFoundError")  # no model.safetensors, nor the .bin
    assert "the file is on node 0's own disk; node 1's disk has none" in shipped["explanation"]
    assert (each["verdict"], [r["outcome"] for r in each["ranks"]]) == ("clean", ["loaded", "loaded"]), \
        each["explanation"]
    writers = {e["rank"] for e in of(events_of(each), "save_end")}
    assert writers == {0, 1}  # each node's main process wrote its own copy


def test_a_failed_save_is_not_clean_and_the_run_ends_by_itself(runs):
    group = runs["save_fails"]
    s = group.cell("as_shipped")  # ended() inside: within ENDS_WITHIN_S, and no process left
    assert group.rc == 0, group.out[-3000:]
    assert s["status"] == "ok"  # every rank ended on its own, well inside timeout.run_s
    assert s["verdict"] == "race" and s["ranks"][0]["outcome"] == "corrupt"  # rank 0 read its own half file
    assert "rank 0's save failed (OSError: [Errno 28] No space left on device)" in s["explanation"]
    events = events_of(s)
    began = next(e for e in of(events, "save_start", 0) if e["epoch"] == 2)
    if of(events, "load_attempt", 1)[0]["t"] < began["t"]:  # the epoch-1 file, found while rank 0 was late
        assert s["ranks"][1]["outcome"] == "stale"
    else:  # the half file, or the epoch-1 file in the moment before the failed write began
        assert s["ranks"][1]["outcome"] in ("loaded", "corrupt")
    failed = of(events, "save_error", 0)
    assert [e["epoch"] for e in failed] == [2] and failed[0]["error_type"] == "OSError"
    assert {e["rank"] for e in of(events, "rank_end")} == {0, 1}
    agreed = group.cell("agreed")
    assert (agreed["verdict"], [r["outcome"] for r in agreed["ranks"]]) == ("save_failed", ["skipped", "skipped"])
    assert not of(events_of(agreed), "load_attempt")  # no rank read the half-written file


def test_a_failed_save_with_the_older_file_left_whole_is_never_clean(runs):
    """atomic: rank 0's last save fails and its temporary file goes, so the epoch-1 file stays whole and both ranks
    read it. Rank 0 knows its save failed; rank 1 found that file while rank 0 was still late before the last save
    (skew 1 s), so it read a stale checkpoint, even though the save it did not wait for then failed."""
    s = runs["save_fails"].cell("atomic")
    events = events_of(s)
    began = next(e for e in of(events, "save_start", 0) if e["epoch"] == 2)
    assert [e["epoch"] for e in of(events, "save_error", 0)] == [2]
    assert s["verdict"] == "race", s["explanation"]  # never clean: a save failed
    assert s["explanation"].startswith("race: rank 0's save failed (OSError: [Errno 28] No space left on device)")
    assert s["ranks"][0]["outcome"] == "loaded" and s["replicas"] == "agree"  # the epoch-1 file, on both
    if of(events, "load_attempt", 1)[0]["t"] < began["t"]:  # as it does unless rank 1 stalled past the skew
        assert s["ranks"][1]["outcome"] == "stale"
        assert s["ranks"][1]["detail"].startswith("loaded the epoch-1 save, read ")
        assert s["ranks"][1]["detail"].endswith("before rank 0's save of epoch 2 began; that save then failed")
    else:
        assert "rank 1 never said the save failed" in s["explanation"]
