"""framework=transformers: the Trainer's own save-best / load-best-at-the-end (load_best_model_at_end=True), as
shipped and with its fixes, with real gloo ranks (world_size=2).

As shipped, the Trainer's barrier after each save holds on a shared filesystem (seed). On node-local disks with
a best epoch before the last (no_shared_fs, fault.best_epoch=0), rank 1 cannot find the best checkpoint: the
Trainer only warns and rank 1 keeps its training weights, so the replicas diverge while every rank exits 0;
broadcast holds there. save_on_each_node (the Trainer's option, #12421)
gives every node a file, but each node's own replica: small_cnn's BatchNorm statistics differ per rank, so the
replicas still end apart. When rank 0's save fails
(save_fails), the Trainer raises out of train() on rank 0 and its peer's barrier breaks.

Two sweeps run side by side, started together by one fixture (their time is mostly start-up and stalls); the fixes
on node-local disks (broadcast, save_on_each_node) are a slow fixture's.
"""
from pathlib import Path

import pytest

from conftest import sweep_groups

pytestmark = pytest.mark.slow  # the Trainer as shipped and with fixes: real-rank sweeps (make test-fast leaves them out; CI runs them)


ENDS_WITHIN_S = 300  # both sweeps together; each takes well under a minute on 2 idle cores

# the best epoch is the first: a rank that keeps its own training weights really differs
NODE_LOCAL = ["scenario=no_shared_fs", "fault.best_epoch=0", "epochs=3"]
SWEEPS = {
    "shared": ["scenario=seed,save_fails", "fix=as_shipped"],
    "no_shared_fs": [*NODE_LOCAL, "fix=as_shipped"],
}
# the fixes on node-local disks: two more jobs whose two node agents each start their own processes (slow, as
# test_lightning.py's and test_accelerate.py's no_shared_fs are)
SLOW_SWEEPS = {"no_shared_fs": [*NODE_LOCAL, "fix=save_on_each_node,broadcast"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """name -> conftest's Launch, both sweeps started together."""
    root = tmp_path_factory.mktemp("transformers")
    return sweep_groups(root, SWEEPS, "world_size=2", "framework=transformers", deadline_s=ENDS_WITHIN_S)


@pytest.fixture(scope="module")
def slow_runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("transformers_slow")
    return sweep_groups(root, SLOW_SWEEPS, "world_size=2", "framework=transformers", deadline_s=ENDS_WITHIN_S)


def cell(runs, sweep, scenario, fix) -> dict:
    found = runs[sweep].summaries()
    assert (scenario, fix) in found, f"no {scenario}-{fix} summary. Output:\n{runs[sweep].out[-3000:]}"
    return found[(scenario, fix)]


def events_of(summary) -> list:
    from train.events import read_events
    return read_events(summary["run_dir"])


def of(events, name, rank=None) -> list:
    return [e for e in events if e["event"] == name and (rank is None or e["rank"] == rank)]


def node_logs(summary, node) -> str:
    """Every log of one node's agent and ranks (no_shared_fs: one rank a node)."""
    return "".join(p.read_text() for p in (Path(summary["run_dir"]) / "nodes" / f"node{node}").rglob("*.log"))


def test_as_shipped_on_a_shared_filesystem_the_trainers_barrier_holds(runs):
    s = cell(runs, "shared", "seed", "as_shipped")
    assert (s["verdict"], [r["outcome"] for r in s["ranks"]], s["replicas"]) == ("clean", ["loaded"] * 2, "agree"), \
        s["explanation"]
    assert "rank 1 waited" in s["explanation"] and "at the barrier" in s["explanation"]  # the skew it avoided
    events = events_of(s)
    best = of(events, "save_end", 0)[-1]  # the save of the checkpoint the Trainer keeps as its best
    assert {r["final_digest"] for r in s["ranks"]} == {best["digest"]}
    for rank in (0, 1):  # each read the best checkpoint's file, whole, after it was written
        attempt, done = of(events, "load_attempt", rank)[-1], of(events, "load_done", rank)[-1]
        assert attempt["path"] == best["path"] == done["path"] and attempt["bytes"] == best["bytes"]
        assert attempt["t"] > best["t"]


def test_as_shipped_without_a_shared_filesystem_the_replicas_diverge_and_the_trainer_only_warns(runs):
    s = cell(runs, "no_shared_fs", "no_shared_fs", "as_shipped")
    assert (s["verdict"], [r["outcome"] for r in s["ranks"]], s["replicas"]) == \
        ("race", ["loaded", "missing"], "diverged"), s["explanation"]
    assert "the Trainer only warned and kept its training weights" in s["explanation"]
    assert "the replicas diverged" in s["explanation"]
    assert runs["no_shared_fs"].rc == 0 and s["status"] == "ok"  # the Trainer raised nothing: every rank exits 0
    events = events_of(s)
    assert not of(events, "rank_failed") and {e["rank"] for e in of(events, "rank_end")} == {0, 1}
    assert not of(events, "save_end", 1)  # only rank 0 wrote, on node 0's own disk
    assert of(events, "load_attempt", 1)[-1]["bytes"] is None  # its best checkpoint's file was not on node 1
    assert "Could not locate the best model" in node_logs(s, 1)  # the Trainer's own warning, on rank 1's node
    assert "Could not locate the best model" not in node_logs(s, 0)


@pytest.mark.slow
def test_broadcast_holds_without_a_shared_filesystem(slow_runs):
    s = cell(slow_runs, "no_shared_fs", "no_shared_fs", "broadcast")
    assert (s["verdict"], [r["outcome"] for r in s["ranks"]], s["replicas"]) == ("clean", ["loaded"] * 2, "agree"), \
        s["explanation"]
    events = events_of(s)
    assert s["node_disk"] == "mount"  # each node had its own tmpfs on checkpoint.dir
    assert {e["rank"] for e in of(events, "save_end")} == {0}  # rank 0 wrote, on node 0's disk only
    assert of(events, "load_attempt", 1)[-1].get("source") == "broadcast from rank 0"
    assert {r["final_digest"] for r in s["ranks"]} == {of(events, "save_end", 0)[0]["digest"]}  # epoch 0: the best


@pytest.mark.slow
def test_save_on_each_node_reads_each_nodes_own_copy_and_the_copies_differ(slow_runs):
    """The Trainer's option writes each node's own replica. small_cnn has BatchNorm, whose running statistics
    each DDP rank updates on its own batches (the Trainer evaluates the unwrapped model, so DDP never evens them
    out before a save): node 1's copy differs from node 0's in those buffers, each node loads its own, and the
    replicas end apart. Which rank the verdict calls stale depends on whose save ended last; the race does not."""
    s = cell(slow_runs, "no_shared_fs", "no_shared_fs", "save_on_each_node")
    assert (s["verdict"], sorted(r["outcome"] for r in s["ranks"]), s["replicas"]) == \
        ("race", ["loaded", "stale"], "diverged"), s["explanation"]
    assert slow_runs["no_shared_fs"].rc == 0 and s["status"] == "ok"
    events = events_of(s)
    copies = {rank: of(events, "save_end", rank)[0] for rank in (0, 1)}  # epoch 0 (the best), on each node
    assert copies[0]["epoch"] == copies[1]["epoch"] == 0 and copies[0]["digest"] != copies[1]["digest"]
    for rank in (0, 1):  # each read the file on its own node's disk: its own node's copy
        assert of(events, "load_done", rank)[-1]["digest"] == copies[rank]["digest"]
        assert {r["final_digest"] for r in s["ranks"] if r["rank"] == rank} == {copies[rank]["digest"]}


def test_a_failed_save_leaves_train_on_rank_0_and_breaks_its_peers_barrier(runs):
    s = cell(runs, "shared", "save_fails", "as_shipped")
    assert s["verdict"] == "race" and s["verdict"] != "clean", s["explanation"]
    assert [r["outcome"] for r in s["ranks"]] == ["skipped", "aborted"], s["explanation"]
    assert s["explanation"].startswith("race: rank 0's save failed (OSError: [Errno 28] No space left on device)")
    assert "the Trainer raised its save's error out of train()" in s["explanation"]
    events = events_of(s)
    failed = of(events, "save_error", 0)[-1]
    assert failed["epoch"] == s["config"]["epochs"] - 1
    assert not of(events, "load_attempt")  # no rank read anything
    broke = of(events, "sync_error", 1)
    assert not any(e["timed_out"] for e in broke)  # it ended when rank 0 died, not by waiting out its timeout
    assert s["status"] == "failed"  # rank 0 exited with the Trainer's error, as shipped
