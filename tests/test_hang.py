"""A hang named the moment it is certain (train/toolkit/hang.py): the rule from hand-made places, then real gloo ranks.

With real ranks (world_size=2, one Hydra multirun so later jobs fork from a warm forkserver): when the ranks
disagree on the file, rank 0 waits in a collective that rank 1 went past; the run names it at once (a hang
event, no timed-out wait) and ends. Where rank 0 is merely late (the seed: it stalls before its last save while
rank 1 waits), nothing fires and the ranks meet. Two ranks paired in two different collectives (a fix of the
tests' own, tests/mismatched_syncs.py) have no peer at the end to release them: they are ended with EXIT_HUNG.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from conftest import ROOT, processes_tagged, tagged_env
from train.toolkit import hang
from train.bench.measure import hang_to_end


def sync(how, n):
    return {"at": "sync", "how": how, "n": n, "t": 0.0}


@pytest.mark.parametrize("peer, never", [
    ({"at": "end", "n": 0}, True),  # it went on to the end without entering this sync
    ({"at": "done", "n": 1}, True),
    ({"at": "end", "n": 2}, False),  # it entered this sync (and left it, by its own timeout): not certain
    ({"at": "work", "n": 1}, False),  # training, a stall, a save, a load: it may still come
    (sync("barrier", 2), False),  # the same sync: they meet
    (sync("agree", 1), False),  # a collective before this one: it is behind and may still come
    (sync("agree", 2), True),  # a different collective in this one's place
    (sync("file", 2), False),  # a file wait is no collective: it may still come
])
def test_only_a_peer_that_can_never_come_to_this_sync_counts(peer, never):
    assert hang.unreachable(sync("barrier", 2), {**peer, "t": 0.0}) is never


def test_a_rank_counts_in_at_the_end_once_and_the_last_one_releases_every_rank():
    server = dist.TCPStore("127.0.0.1", 0, 1, True)
    hang._counted = False
    try:
        hang.count_in(server, 2)
        hang.count_in(server, 2)  # the hung rank's watcher, then its own way to the end: counted once
        assert not server.check([hang.ALL_DONE])
        assert server.add(hang.DONE, 1) == 2  # the peer's count: the last
    finally:
        hang._counted = False


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> dict:
    """(scenario, fix) -> (summary.json, events) of one multirun: disagree and seed x barrier and broadcast."""
    from train.events import read_events

    sweep = tmp_path_factory.mktemp("hang") / "sweep"
    proc = subprocess.run([sys.executable, "-m", "train", "-m", "world_size=2", "scenario=disagree,seed",
                           "callback=barrier,broadcast", f"hydra.sweep.dir={sweep}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=400, env=tagged_env(str(sweep)))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not processes_tagged(str(sweep)), "the sweep left processes running"
    found = {}
    for path in sweep.glob("*/summary.json"):
        s = json.loads(path.read_text())
        found[(s["config"]["scenario"], s["config"]["callback"]["name"])] = (s, read_events(s["run_dir"]))
    return found


@pytest.mark.parametrize("fix", ["barrier", "broadcast"])
def test_a_collective_the_peer_went_past_is_named_at_once_not_waited_out(cells, fix):
    s, events = cells[("disagree", fix)]
    assert (s["verdict"], [r["outcome"] for r in s["ranks"]]) == ("race", ["hung", "skipped"]), s["explanation"]
    went = "rank 1 skipped the load and went on to the end of the run without entering it"
    assert s["ranks"][0]["detail"] == f"its {fix} could never end: {went}"
    assert f"rank 0 hung (its {fix} could never end: {went}; ended at once" in s["explanation"]
    hung = [e for e in events if e["event"] == "hang"]
    assert [(e["rank"], e["sync"], e["waiting_for"], e["peers"]["1"]["at"]) for e in hung] == [(0, fix, [1], "end")]
    assert not any(e.get("timed_out") for e in events), "a wait ran to timeout.collective_s"
    assert s["status"] in ("ok", "failed")  # failed: the rank had to be ended with EXIT_HUNG; never a harness error
    assert hang_to_end(Path(s["run_dir"])) is not None  # make bench's figure reads from these events (no time asserted)


@pytest.mark.parametrize("fix", ["barrier", "broadcast"])
def test_a_peer_that_is_only_late_never_counts(cells, fix):
    s, events = cells[("seed", fix)]  # rank 0 stalls 3 s before its last save while rank 1 waits for it
    assert (s["verdict"], [r["outcome"] for r in s["ranks"]]) == ("clean", ["loaded", "loaded"]), s["explanation"]
    assert not any(e["event"] == "hang" for e in events)
    waited = next(e for e in events if e["event"] == "sync_enter" and e["rank"] == 1)
    assert waited["t"] < next(e for e in events if e["event"] == "save_end")["t"]  # rank 1 did wait for the late one


def test_two_ranks_in_two_different_collectives_are_named_and_ended(train):
    """Rank 0 in a barrier, rank 1 in a broadcast (tests/mismatched_syncs.py): no peer is at the end to
    release, so each rank that sees it is ended with EXIT_HUNG; the run is a race, not a harness error."""
    run = train("world_size=2", "callback=barrier", "callback._target_=mismatched_syncs.MismatchedSyncsSaveModelCallback",
                "skew.seconds=0", env={"PYTHONPATH": str(ROOT / "tests")})
    assert run.rc == 0, run.out[-3000:] + run.err[-3000:]
    s = run.summary
    assert (s["verdict"], s["status"]) == ("race", "failed"), s["explanation"]
    # the rank that came second sees the other at once and ends; the first sees it too, or its wait breaks
    # when the other is gone (aborted): which one is the machine's timing, either is true
    details = {0: "its barrier could never end: rank 1 waited in its agree instead",
               1: "its agree could never end: rank 0 waited in its barrier instead"}
    hung = [r["rank"] for r in s["ranks"] if r["outcome"] == "hung"]
    assert hung and {r["outcome"] for r in s["ranks"]} <= {"hung", "aborted"}, s["explanation"]
    assert all(s["ranks"][r]["detail"] == details[r] for r in hung)
    failed = [e for e in run.events if e["event"] == "rank_failed"]
    assert failed[0]["exitcode"] == hang.EXIT_HUNG and failed[0]["failed_rank"] in hung
    assert not any(e.get("timed_out") for e in run.events)
    assert not processes_tagged(str(run.dir))
