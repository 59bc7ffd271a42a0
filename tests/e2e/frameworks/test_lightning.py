"""Lightning's own save-best / load-best-at-the-end path (ModelCheckpoint, validate(ckpt_path="best")), as shipped
and with a fix, on real gloo ranks (world_size=2).

As shipped, Trainer.save_checkpoint's barrier holds rank 0's skew (seed: clean); without a shared filesystem
rank 1's read finds no file (no_shared_fs: race, missing); a failed save raises on rank 0 before the barrier,
and rank 1 waits there until the collective timeout (save_fails: race). The fixes: broadcast (rank 0 reads, the
others get its checkpoint) holds on no_shared_fs; agreed says save_failed on save_fails.

The seed and save_fails cells are one multirun, in the fast loop (about a minute; its later jobs fork from a warm
forkserver); the no_shared_fs cells (two node agents each, which start their ranks afresh) run side by side and
are slow (about a minute more). Each launch must end in time and leave no process.
"""
from pathlib import Path

import pytest

from conftest import OWN_CLASSES, run_train, sweep_groups
from train.events import read_events

pytestmark = pytest.mark.slow  # Lightning as shipped and with fixes: real-rank sweeps (make test-fast leaves them out; CI runs them)


ENDS_WITHIN_S = 240  # each group of launches; under a minute on 2 idle cores

# name -> a multirun's arguments
SHARED = {"shared": ["scenario=seed,save_fails", "fix=as_shipped,agreed"]}
NO_SHARED_FS = {"nsf_as_shipped": ["scenario=no_shared_fs", "fix=as_shipped"],
                "nsf_broadcast": ["scenario=no_shared_fs", "fix=broadcast"]}


def start_together(root: Path, sweeps: dict) -> dict:
    """Start every multirun, wait for all (each stopped at ENDS_WITHIN_S), and return (scenario, fix) -> summary."""
    cells = {}
    for launch in sweep_groups(root, sweeps, "world_size=2", "framework=lightning", deadline_s=ENDS_WITHIN_S).values():
        cells.update(launch.summaries())
        assert launch.rc == 0, launch.out[-3000:]
    return cells


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> dict:
    return start_together(tmp_path_factory.mktemp("lightning"), SHARED)


@pytest.fixture(scope="module")
def node_local(tmp_path_factory) -> dict:
    return start_together(tmp_path_factory.mktemp("lightning_nsf"), NO_SHARED_FS)


def events_of(summary) -> list:
    return read_events(summary["run_dir"])


def first(events, name, rank, **fields):
    return next(e for e in events if e["event"] == name and e["rank"] == rank
                and all(e.get(k) == v for k, v in fields.items()))


def outcomes(summary) -> list:
    return [r["outcome"] for r in summary["ranks"]]


def test_as_shipped_the_barrier_after_the_save_holds_the_skew(shared):
    s = shared[("seed", "as_shipped")]
    assert (s["verdict"], outcomes(s), s["replicas"]) == ("clean", ["loaded", "loaded"], "agree"), s["explanation"]
    assert "rank 0 was 3.0 s late at its last save" in s["explanation"]
    events = events_of(s)
    last_save = [e for e in events if e["event"] == "save_end"][-1]
    assert last_save["epoch"] == s["config"]["epochs"] - 1  # the last epoch saved: the skew met a save
    assert {r["final_digest"] for r in s["ranks"]} == {last_save["digest"]}
    assert first(events, "load_attempt", 1)["t"] >= last_save["t"]  # it read once the save had ended
    assert first(events, "load_done", 1)["digest"] == last_save["digest"]  # what it READ, not rank 0's broadcast


@pytest.mark.slow
def test_as_shipped_without_a_shared_filesystem_rank_1_finds_no_file(node_local):
    s = node_local[("no_shared_fs", "as_shipped")]
    # rank 0 loaded, then its validate's send timed out: rank 1, whose load failed, had left validate
    assert (s["verdict"], outcomes(s)) == ("race", ["timeout", "missing"]), s["explanation"]
    assert s["ranks"][0]["detail"].startswith("after its load, trainer.validate: RuntimeError: ")  # gloo's timeout
    assert s["node_disk"] == "mount"  # each node's agent had its own tmpfs on checkpoint.dir
    assert s["ranks"][1]["detail"].startswith("FileNotFoundError: Checkpoint file not found")
    assert "rank 1 tried to load (FileNotFoundError): the file is on node 0's own disk; node 1's disk has none" \
        in s["explanation"]
    events = events_of(s)
    assert first(events, "load_attempt", 1)["bytes"] is None
    # rank 0 read the file, then waited in Lightning's weight broadcast for rank 1, which had failed: it gave up at
    # timeout.collective_s, and the run ended
    assert first(events, "load_done", 0)["digest"] == [e for e in events if e["event"] == "save_end"][-1]["digest"]


def test_as_shipped_a_failed_save_is_a_race_whose_hang_is_named_at_once(shared):
    """Rank 0's fit raises out of Lightning before Trainer.save_checkpoint's barrier; rank 1 waits in that
    barrier for a rank that went on to the end: named the moment it is certain (train/toolkit/hang.py), not at
    timeout.collective_s."""
    s = shared[("save_fails", "as_shipped")]
    assert (s["verdict"], outcomes(s)) == ("race", ["skipped", "hung"]), s["explanation"]
    assert s["explanation"].startswith("race: rank 0's save failed (OSError: [Errno 28] No space left on device)")
    assert "rank 1 hung (its barrier could never end: rank 0 skipped the load and went on to the end of the run " \
           "without entering it" in s["explanation"]
    events = events_of(s)
    failed = first(events, "save_error", 0)
    assert failed["epoch"] == s["config"]["epochs"] - 1
    hang = first(events, "hang", 1)
    assert hang["sync"] == "barrier"
    assert not any(e["event"] == "sync_error" and e.get("timed_out") for e in events)  # no wait ran out
    assert not any(e["event"] == "load_attempt" for e in events)  # Lightning's fit raised on both: no load
    assert s["ranks"][0]["detail"] == "trainer.fit raised OSError, so validate(ckpt_path='best') never ran"


@pytest.mark.slow
def test_broadcast_holds_without_a_shared_filesystem(node_local):
    s = node_local[("no_shared_fs", "broadcast")]
    assert (s["verdict"], outcomes(s), s["replicas"]) == ("clean", ["loaded", "loaded"], "agree"), s["explanation"]
    events = events_of(s)
    attempts = {e["rank"]: e for e in events if e["event"] == "load_attempt"}
    assert attempts[1]["source"] == "broadcast from rank 0" and "path" not in attempts[1]  # it never touched a disk
    assert attempts[0]["bytes"] > 0


def test_agreed_says_the_save_failed_and_no_rank_waits_for_it(shared):
    s = shared[("save_fails", "agreed")]
    assert (s["verdict"], outcomes(s)) == ("save_failed", ["skipped", "skipped"]), s["explanation"]
    assert {r["detail"] for r in s["ranks"]} == {"rank 0's save failed: every rank agreed not to load"}
    assert len({r["final_digest"] for r in s["ranks"]}) == 1
    assert shared[("seed", "agreed")]["verdict"] == "clean"


def test_a_rank_that_fails_after_its_load_is_never_loaded(tmp_path):
    """Rank 1's validate(ckpt_path="best") raises once its load ended well (tests/own_classes/after_load.py, as a validate
    whose collective timed out does): the adapter records it (train_error), so the rank is an error, not
    `loaded`, and the run has no clean verdict."""
    run = run_train(tmp_path / "run", "world_size=2", "framework=lightning", "scenario=seed", "fix=own",
                    "fix._target_=after_load.FailsAfterLoad", env={"PYTHONPATH": str(OWN_CLASSES)})
    s = run.summary
    assert (s["verdict"], outcomes(s)) == ("error", ["loaded", "error"]), s["explanation"]
    assert run.rc == 3  # the harness's exit code for an error verdict
    assert s["ranks"][1]["detail"] == ("after its load, trainer.validate: RuntimeError: rank 1 failed after its load "
                                       "(tests/own_classes/after_load.py)")
    events = events_of(s)
    assert first(events, "train_error", 1, what="trainer.validate")["t"] > first(events, "load_done", 1)["t"]
    assert s["explanation"].startswith("error: rank 1 failed (after its load, trainer.validate: RuntimeError")
