"""Every fix's defining cell and every verdict, with real gloo ranks (world_size=2), in the fast loop.

A fix's defining cell is where it parts from its neighbours in the matrix (test_matrix.py runs every cell,
slowly): on a half-written file (torn) poll reads it and fails, while atomic and the barrier hold; when the
ranks disagree on the file (disagree), agreed and dcp hold where the others skip or hang (the barrier's hang is
named at once: rank 0 hung, train/toolkit/hang.py), and on a failed save
(save_fails) agreed alone says save_failed; dcp holds the seed; without a shared filesystem (no_shared_fs)
broadcast and save_on_each_node hold. Each verdict is here too: clean and race in those cells, save_failed,
race for ranks that timed out, race for a crafted pickle that weights_only=True refused (unsafe; its code
never ran), error for a checkpoint of another model. (interrupted: test_race.py's Ctrl-C test.)

A hang named the moment it is certain (train/toolkit/hang.py; its rule from hand-made places in test_hang.py)
with real ranks: when the ranks disagree on the file, rank 0 waits in a collective (barrier, broadcast) that
rank 1 went past; the run names it at once and ends. Where rank 0 is merely late (seed), nothing fires. Two
ranks in two different collectives are both named and ended with EXIT_HUNG.

The runs go side by side, started together by one fixture: most of their time is spent in the scenarios'
stalls and timeouts, not on the cores. The cells of a scenario group are one Hydra multirun, so its jobs
after the first fork from a warm forkserver. A run that does not end in time is stopped, and the tests that
need it fail with its name.
"""
import json
import sys
from pathlib import Path

import pytest

from conftest import OWN_CLASSES, alive, side_by_side
from helpers.matrix_expected import EXPECTED, FIXES
from train.bench.measure import hang_to_end
from train.toolkit import hang


ENDS_WITHIN_S = 420  # every group together; each takes well under a minute on 2 idle cores

# Writes the planted checkpoints with torch, then becomes the launcher (one process, torch imported once).
PLANT_THEN_RUN = """
import os, sys, torch
evil, foreign, marker, *train = sys.argv[1:]

class Payload:  # unpickled without weights_only, this would create the marker
    def __reduce__(self):
        return os.system, (f"touch {marker}",)

for folder in (evil, foreign):
    os.makedirs(folder)
torch.save({"weight": Payload()}, f"{evil}/best.pth")
torch.save({"weight": torch.zeros(50_000)}, f"{foreign}/best.pth")  # another model, larger than the real one
os.execv(sys.executable, [sys.executable, "-m", "train", *train])
"""


def groups(root: Path) -> dict:
    """name -> (argv, the run or sweep dir)."""
    evil, foreign, marker = root / "evil", root / "foreign", root / "ran"
    sweep = {
        "torn": ["scenario=torn", "fix=poll,atomic,barrier"],
        "disagree": ["scenario=disagree,save_fails,seed", "fix=agreed,dcp"],
        # the hang named at once (disagree) and a late peer that never counts (seed): test_hang.py's real ranks
        "hung": ["scenario=disagree,seed", "fix=barrier,broadcast"],
        "no_shared_fs": ["scenario=no_shared_fs", "fix=broadcast,save_on_each_node"],
        "planted": ["fix=unsynced", "epochs=1", "checkpoint.keep_existing=true",
                    f"checkpoint.dir={evil},{foreign}"],
    }
    out = {name: ([sys.executable, "-m", "train", "-m", "world_size=2", *argv, f"hydra.sweep.dir={root / name}"],
                  root / name) for name, argv in sweep.items()}
    out["planted"] = ([sys.executable, "-c", PLANT_THEN_RUN, str(evil), str(foreign), str(marker),
                       *out["planted"][0][3:]], root / "planted")
    timeouts = {  # rank 0 stalls before its save while rank 1 waits at the barrier:
        "collective_timeout": ["skew.seconds=15", "timeout.collective_s=3"],  # rank 1 gives up after 3 s
        # the launcher stops both at 90 s: the stall fits inside the limit (a longer one is refused before any
        # rank starts), the start before it does not (the clock starts before the ranks do: at least 3 s, up to
        # 25 s here side by side on 2 idle cores, over 60 s on 2 cores loaded by others); rank 1's barrier waits
        # longer than the run (at the default 60 s, rank 1 gave up first wherever the ranks started within 30 s)
        "run_timeout": ["skew.seconds=89.9", "timeout.run_s=90", "timeout.collective_s=120"],
    }
    for name, argv in timeouts.items():
        out[name] = ([sys.executable, "-m", "train", "world_size=2", "epochs=1", "fix=barrier", *argv,
                      f"hydra.run.dir={root / name}"], root / name)
    # rank 0 in a barrier, rank 1 in a broadcast: a fix of the tests' own (tests/own_classes/mismatched_syncs.py), which its
    # ranks import from PYTHONPATH
    out["mismatched"] = (["env", f"PYTHONPATH={OWN_CLASSES}", sys.executable, "-m", "train", "world_size=2",
                          "fix=own", "fix._target_=mismatched_syncs.MismatchedSyncsSaveModelCallback",
                          "skew.seconds=0", f"hydra.run.dir={root / 'mismatched'}"], root / "mismatched")
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("cells")
    return {**side_by_side(root, groups(root), ENDS_WITHIN_S), "root": root}


# (scenario, fix) -> (verdict, each rank's outcome), as the matrix has them
CELLS = {
    ("torn", "poll"): ("race", ["loaded", "corrupt"]),
    ("torn", "atomic"): ("clean", ["loaded", "loaded"]),
    ("torn", "barrier"): ("clean", ["loaded", "loaded"]),
    ("disagree", "agreed"): ("clean", ["loaded", "loaded"]),
    ("disagree", "dcp"): ("clean", ["loaded", "loaded"]),
    ("disagree", "barrier"): ("race", ["hung", "skipped"]),
    ("save_fails", "agreed"): ("save_failed", ["skipped", "skipped"]),
    ("seed", "agreed"): ("clean", ["loaded", "loaded"]),
    ("seed", "dcp"): ("clean", ["loaded", "loaded"]),
    ("no_shared_fs", "broadcast"): ("clean", ["loaded", "loaded"]),
    ("no_shared_fs", "save_on_each_node"): ("clean", ["loaded", "loaded"]),
}


def group_of(scenario, fix) -> str:
    if (scenario, fix) == ("disagree", "barrier"):
        return "hung"
    return scenario if scenario in ("torn", "no_shared_fs") else "disagree"


def events_of(summary) -> list:
    from train.events import read_events
    return read_events(summary["run_dir"])


def first(events, name, rank):
    return next(e for e in events if e["event"] == name and e["rank"] == rank)


@pytest.mark.parametrize("scenario, fix", CELLS, ids=[f"{s}-{f}" for s, f in CELLS])
def test_each_fix_in_its_defining_cell(runs, scenario, fix):
    group = runs[group_of(scenario, fix)]
    s = group.summaries()[(scenario, fix)]
    verdict, outcomes = CELLS[(scenario, fix)]
    assert verdict == EXPECTED[scenario][FIXES.index(fix)][0]  # the matrix's cell, and README's
    assert (s["verdict"], [r["outcome"] for r in s["ranks"]]) == (verdict, outcomes), s["explanation"]
    if verdict == "race":  # where no rank loaded (rank 0 hung before its read), each keeps the weights it trained
        assert s["replicas"] == ("diverged" if "loaded" in outcomes else "agree")
        return
    assert s["replicas"] == "agree"  # clean or save_failed: every rank ends with the same weights
    events = events_of(s)
    last_save = [e for e in events if e["event"] == "save_end"]
    if verdict == "clean":
        assert {r["final_digest"] for r in s["ranks"]} == {last_save[-1]["digest"]}
    else:  # the last epoch's save failed, and no rank loaded
        last_epoch = s["config"]["epochs"] - 1
        assert first(events, "save_error", 0)["epoch"] == last_epoch
        assert not any(e["epoch"] == last_epoch for e in last_save)
        assert not any(e["event"] == "load_attempt" for e in events)


def test_poll_reads_the_half_written_file_where_atomic_and_the_barrier_read_the_whole(runs):
    cells = runs["torn"].summaries()
    assert runs["torn"].rc == 0, runs["torn"].out[-3000:]
    poll = events_of(cells[("torn", "poll")])
    header = (Path(cells[("torn", "poll")]["run_dir"]) / "console.log").read_text()
    assert "\nfault: rank 0 stalls 3 s halfway through writing the last checkpoint; every rank but rank 0 pauses " \
        "1 s before it loads\n" in header  # the header says what the scenario injects
    assert first(poll, "load_attempt", 1)["bytes"] < first(poll, "save_end", 0)["bytes"]
    assert first(poll, "load_attempt", 1)["t"] < first(poll, "save_end", 0)["t"]
    for fix in ("atomic", "barrier"):  # they read only once the save had ended
        events = events_of(cells[("torn", fix)])
        assert first(events, "load_attempt", 1)["t"] >= first(events, "save_end", 0)["t"], fix
    assert sorted(p.name for p in (Path(cells[("torn", "atomic")]["run_dir"]) / "models").iterdir()) == \
        ["best.pth"]  # atomic's temporary file was renamed onto it


def test_agreed_alone_says_the_save_failed_and_dcp_does_not_apply_there(runs):
    cells = runs["disagree"].summaries()
    assert runs["disagree"].rc == 0, runs["disagree"].out[-3000:]  # an n/a pair is no failure
    s = cells[("save_fails", "agreed")]
    assert {r["detail"] for r in s["ranks"]} == {"rank 0's save failed: every rank agreed not to load"}
    assert len({r["final_digest"] for r in s["ranks"]}) == 1
    na = cells[("save_fails", "dcp")]
    assert (na["status"], na["verdict"], na["ranks"]) == ("n/a", "n/a", [])
    assert not any("save_fails-dcp" in p.name for p in runs["disagree"].dir.iterdir())  # left out: never launched


def test_without_a_shared_filesystem_node_1_never_reads_a_file_it_does_not_have(runs):
    """Each node's agent had its own tmpfs on checkpoint.dir (launch.node_disks=auto, as root here): the
    files went with the nodes, so the events tell who read and who wrote where."""
    from train.events import read_events

    cells = runs["no_shared_fs"].summaries()
    assert runs["no_shared_fs"].rc == 0, runs["no_shared_fs"].out[-3000:]
    events = {fix: read_events(cells[("no_shared_fs", fix)]["run_dir"]) for fix in ("broadcast", "save_on_each_node")}
    assert {cells[("no_shared_fs", fix)]["node_disk"] for fix in events} == {"mount"}
    attempts = {e["rank"]: e for e in events["broadcast"] if e["event"] == "load_attempt"}
    assert attempts[1] == {**attempts[1], "source": "broadcast from rank 0"} and "path" not in attempts[1]
    assert attempts[0]["bytes"] > 0  # rank 0 read it and sent the weights
    writers = {e["rank"] for e in events["save_on_each_node"] if e["event"] == "save_end"}
    assert writers == {0, 1}  # each node wrote its own copy


def planted(runs, name) -> dict:
    group = runs["planted"]
    group.ended()
    for path in group.dir.glob("*/summary.json"):
        s = json.loads(path.read_text())
        if Path(s["config"]["checkpoint"]["dir"]).name == name:
            return s
    raise AssertionError(f"no run with the {name} checkpoint:\n{group.out[-3000:]}")


def test_a_crafted_pickle_is_refused_by_weights_only_and_its_code_never_runs(runs):
    s = planted(runs, "evil")
    assert [r["outcome"] for r in s["ranks"]] == ["loaded", "unsafe"]  # rank 1 read it before rank 0 wrote
    assert s["verdict"] == "race"
    assert s["ranks"][1]["detail"].startswith("UnpicklingError: Weights only load failed")
    assert not (runs["root"] / "ran").exists(), "a load ran the checkpoint's code"


def test_a_checkpoint_of_another_model_is_an_error_not_a_race(runs):
    s = planted(runs, "foreign")
    assert [r["outcome"] for r in s["ranks"]] == ["loaded", "error"]
    assert s["verdict"] == "error"
    assert s["ranks"][1]["detail"].startswith("RuntimeError: Error(s) in loading state_dict")
    assert runs["planted"].rc == 1  # the sweep ends saying which job gave no result
    assert "[sweep] 1 of 2 jobs did not give a result" in runs["planted"].out


def test_a_barrier_whose_peer_stalls_ends_by_the_collective_timeout_as_a_race(runs):
    group = runs["collective_timeout"]
    group.ended()
    assert group.rc == 0, group.out[-3000:]
    s = json.loads((group.dir / "summary.json").read_text())
    rank1 = s["ranks"][1]
    assert rank1["outcome"] == "timeout" and rank1["detail"].startswith("barrier: ")
    events = events_of(s)
    gave_up = first(events, "sync_error", 1)
    assert gave_up["timed_out"] and gave_up["how"] == "barrier"
    assert gave_up["t"] < first(events, "save_start", 0)["t"]  # ended by its timeout, before the peer came
    assert s["verdict"] == "race"


def test_the_launcher_stops_every_rank_at_the_run_timeout_as_a_race(runs):
    group = runs["run_timeout"]
    group.ended()
    assert group.rc == 0, group.out[-3000:]
    s = json.loads((group.dir / "summary.json").read_text())
    assert s["status"] == "timeout"
    assert [(r["outcome"], r["detail"]) for r in s["ranks"]] == [("timeout", "stopped by the launcher at "
                                                                  "timeout.run_s")] * 2
    assert s["verdict"] == "race"
    pids = [e["pid"] for e in events_of(s) if e["event"] == "rank_start"]
    assert len(pids) == 2, "the run was stopped before its ranks started (a machine too busy for timeout.run_s)"
    assert not alive(pids)


# --- a hang named at once (train/toolkit/hang.py), with real ranks: the hung group, disagree and seed x barrier
# and broadcast, one multirun ----------------------------------------------------------------------------------

def hung_cell(runs, scenario, fix):
    group = runs["hung"]
    assert group.rc == 0, group.out[-3000:]
    s = group.summaries()[(scenario, fix)]  # the sweep ended and left no process running
    return s, events_of(s)


@pytest.mark.parametrize("fix", ["barrier", "broadcast"])
def test_a_collective_the_peer_went_past_is_named_at_once_not_waited_out(runs, fix):
    s, events = hung_cell(runs, "disagree", fix)
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
def test_a_peer_that_is_only_late_never_counts(runs, fix):
    s, events = hung_cell(runs, "seed", fix)  # rank 0 stalls 3 s before its last save while rank 1 waits for it
    assert (s["verdict"], [r["outcome"] for r in s["ranks"]]) == ("clean", ["loaded", "loaded"]), s["explanation"]
    assert not any(e["event"] == "hang" for e in events)
    waited = next(e for e in events if e["event"] == "sync_enter" and e["rank"] == 1)
    assert waited["t"] < next(e for e in events if e["event"] == "save_end")["t"]  # rank 1 did wait for the late one


def test_two_ranks_in_two_different_collectives_are_named_and_ended(runs):
    """Rank 0 in a barrier, rank 1 in a broadcast (tests/own_classes/mismatched_syncs.py): no peer is at the end to
    release, so each rank that sees it is ended with EXIT_HUNG; the run is a race, not a harness error."""
    run = runs["mismatched"]
    run.ended()  # in time, and no process left
    assert run.rc == 0, run.out[-3000:]
    s = json.loads((run.dir / "summary.json").read_text())
    assert (s["verdict"], s["status"]) == ("race", "failed"), s["explanation"]
    # the rank that came second sees the other at once and ends; the first sees it too, or its wait breaks
    # when the other is gone (aborted): which one is the machine's timing, either is true
    details = {0: "its barrier could never end: rank 1 waited in its agree instead",
               1: "its agree could never end: rank 0 waited in its barrier instead"}
    hung = [r["rank"] for r in s["ranks"] if r["outcome"] == "hung"]
    assert hung and {r["outcome"] for r in s["ranks"]} <= {"hung", "aborted"}, s["explanation"]
    assert all(s["ranks"][r]["detail"] == details[r] for r in hung)
    events = events_of(s)
    failed = [e for e in events if e["event"] == "rank_failed"]
    assert failed[0]["exitcode"] == hang.EXIT_HUNG and failed[0]["failed_rank"] in hung
    assert not any(e.get("timed_out") for e in events)
