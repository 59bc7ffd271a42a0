"""Async saves (issue 27), framework=torch_loop with checkpoint.async_save (dcp.async_save), real gloo ranks
(world_size=2), real SIGKILLs and torch elastic's own restarts; each scenario as shipped (fix=in_place) and with the
fix it is for, one Hydra multirun per scenario, the three side by side:

- async_in_flight: `latest` and the cleanup advance at dispatch; rank 0 is killed while epoch 1's save is in flight:
  the restart follows `latest` to a folder with no .metadata and runs out of restarts (not clean); on_durable: the
  pointer and cleanup wait for the Future and a barrier, and the restart resumes from epoch 0: clean.
- async_exit_pending: the loop does not wait for its last save, rank 0's write of it takes 3 s and lasts until
  the loop waits for it or the rank has left, and the rank ends
  (its process group destroyed, the save's with it): the save's next collective raises in its thread, nobody hears,
  and the run finishes with its final checkpoint never committed (missing, not clean); on_durable waits for it at
  the end (its completion step): clean, the last checkpoint whole.
- async_overlap: the loop dispatches each save without waiting for the one before, and rank 0's write of epoch 0's
  shard lasts until epoch 1's is dispatched: two saves' collectives on one group: hung on every rank (or gloo's
  abort), named by the watcher well before timeout.collective_s; on_durable waits for each before the next: clean.
- async_shared_group: the save's collectives on the training's group: hung on every rank, named by the watcher well
  before timeout.collective_s; own_group: clean.
- dcp_overwrite: a save over one folder, rank 1 killed before its shard: every rank's load returned, and the resume
  is `mixed` (a shard of another step), naming the shard; fresh_rename: clean.
And a Ctrl-C while an async save is in flight leaves no rank, thread or process behind.
"""
import json
from pathlib import Path

import pytest

from conftest import sweep_groups
from helpers.interrupts import assert_stopped_at_once, events_below, interrupt

ENDS_WITHIN_S = 520  # the five groups together; about two minutes on 2 idle cores

GROUPS = {
    "in_flight": ["scenario=async_in_flight", "fix=in_place,on_durable"],
    "exit_pending": ["scenario=async_exit_pending", "fix=in_place,on_durable"],
    "overlap": ["scenario=async_overlap", "fix=in_place,on_durable"],
    "shared_group": ["scenario=async_shared_group", "fix=in_place,own_group"],
    "overwrite": ["scenario=dcp_overwrite", "fix=in_place,fresh_rename"],
}


@pytest.fixture(scope="module")
def groups(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("async")
    return sweep_groups(root, GROUPS, "world_size=2", "framework=torch_loop", deadline_s=ENDS_WITHIN_S)


def by_fix(launch) -> dict:
    return {s["config"]["fix"]["name"]: (s, job) for s, job in launch.jobs()}


def events_of(job_dir: Path) -> list:
    from train.events import read_events
    return read_events(job_dir)


@pytest.mark.slow
def test_the_pointer_advanced_before_durable_is_not_clean_and_on_durable_is(groups):
    naive, job = by_fix(groups["in_flight"])["in_place"]
    assert naive["verdict"] == "race" and naive["resume"]["run"] == "out_of_restarts", naive["explanation"]
    assert "metadata is None" in naive["explanation"]  # KempnerForge#102's own words: .metadata never written
    events = events_of(job)
    crash = next(e for e in events if e["event"] == "crash")
    assert crash["at"] == "in_flight"
    dispatched = [e for e in events if e["event"] == "save_dispatch" and e["epoch"] == 1 and e["attempt"] == 0]
    ended = [e for e in events if e["event"] == "save_end" and e["epoch"] == 1 and e["attempt"] == 0]
    assert dispatched and not ended  # killed in the window: dispatched, never durable
    fixed, job = by_fix(groups["in_flight"])["on_durable"]
    assert fixed["verdict"] == "clean", fixed["explanation"]
    assert {r[-1]["step"] for r in fixed["resume"]["ranks"].values()} == {10}  # epoch 0's, the newest durable
    ends = [e for e in events_of(job) if e["event"] == "save_end"]
    assert ends and all(e["dispatched_t"] <= e["durable_t"] <= e["t"] for e in ends)  # the window, on record


@pytest.mark.slow
def test_a_run_that_ends_with_its_last_save_pending_loses_it_and_on_durable_waits_for_it(groups):
    naive, job = by_fix(groups["exit_pending"])["in_place"]
    assert naive["verdict"] == "race" and naive["resume"]["run"] == "finished", naive["explanation"]
    assert [r["outcome"] for r in naive["ranks"]] == ["missing", "missing"], naive["explanation"]
    assert "its final checkpoint is missing" in naive["explanation"]
    events = events_of(job)
    last = [e for e in events if e["event"] == "save_dispatch" and e["epoch"] == 2]
    assert len(last) == 1 and last[0]["step"] == 30
    assert not [e for e in events if e["event"] in ("save_commit", "save_end") and e["step"] == 30]
    assert not (Path(last[0]["path"]) / ".metadata").exists()  # on disk: never committed
    # its collective (the plan's, or the commit's after rank 0's slow write) on a group its rank had destroyed
    # raised in the save's thread, awaited by no one
    assert {e["step"] for e in events if e["event"] == "async_save_error"} == {30}
    assert all(e["event"] != "train_error" for e in events)  # nothing said so in the loop: it exited 0
    # rank 0's slow write (reached where the plan's collective came before the ranks left) ended as the rank left
    assert {e["until"] for e in events if e["event"] == "slow_write_end"} <= {"rank_left"}
    fixed, job = by_fix(groups["exit_pending"])["on_durable"]
    assert fixed["verdict"] == "clean", fixed["explanation"]
    events = events_of(job)
    assert [e["step"] for e in events if e["event"] == "save_commit"] == [10, 20, 30]
    end = next(e for e in events if e["event"] == "save_end" and e["step"] == 30)
    assert end["durable_t"] - end["dispatched_t"] >= 2.5  # it waited through rank 0's slow write
    assert [e["until"] for e in events if e["event"] == "slow_write_end"] == ["awaited"]
    assert (Path(end["path"]) / ".metadata").exists()


@pytest.mark.slow
def test_a_save_dispatched_before_the_previous_one_finished_is_never_clean_and_on_durable_is(groups):
    """Two saves in flight, each in its own thread, their collectives on the save's one group: they pair by the
    order each rank issued them (hung, named by the watcher; or gloo's own abort of a rank: aborted)."""
    naive, job = by_fix(groups["overlap"])["in_place"]
    assert naive["verdict"] == "race", naive["explanation"]
    outcomes = {r["outcome"] for r in naive["ranks"]}
    assert outcomes <= {"hung", "aborted"}, naive["explanation"]
    events = events_of(job)
    first = [e for e in events if e["event"] == "save_dispatch" and e["epoch"] in (0, 1)]
    end = next(e for e in events if e["event"] == "slow_write_end")
    assert end["next_dispatched"]  # epoch 1's save was dispatched while epoch 0's was in flight
    assert len(first) == 2 and not [e for e in events if e["event"] == "save_end" and e["step"] == 10 and
                                    e["t"] < max(d["t"] for d in first)]
    hangs = [e for e in events if e["event"] == "hang"]
    assert ("hung" in outcomes) == bool(hangs)
    start = min(e["t"] for e in events if e["event"] == "loop_start")
    assert all(e["t"] - start < naive["config"]["timeout"]["collective_s"] / 2 for e in hangs)  # named, not timed out
    assert not [e for e in events if e.get("timed_out")]
    fixed, job = by_fix(groups["overlap"])["on_durable"]
    assert fixed["verdict"] == "clean", fixed["explanation"]
    events = events_of(job)
    ends = {e["step"]: e for e in events if e["event"] == "save_end"}
    dispatches = {e["step"]: e for e in events if e["event"] == "save_dispatch"}
    assert sorted(ends) == [10, 20, 30]
    # one at a time: each durable before the next was dispatched
    assert ends[10]["durable_t"] <= dispatches[20]["t"] and ends[20]["durable_t"] <= dispatches[30]["t"]


@pytest.mark.slow
def test_the_save_on_the_trainings_group_is_never_clean_a_hang_is_named_before_the_timeout_and_its_own_group_is_clean(
        groups):
    """The two threads' collectives pair by chance: most runs deadlock (both ranks hung, named by the watcher), some
    end sooner in gloo's own "collective mismatch" abort of a rank (aborted): docs/async.md has the counts."""
    naive, job = by_fix(groups["shared_group"])["in_place"]
    assert naive["verdict"] == "race", naive["explanation"]
    outcomes = {r["outcome"] for r in naive["ranks"]}
    assert outcomes <= {"hung", "aborted"}, naive["explanation"]
    events = events_of(job)
    hangs = [e for e in events if e["event"] == "hang"]
    start = min(e["t"] for e in events if e["event"] == "loop_start")
    collective_s = naive["config"]["timeout"]["collective_s"]
    assert ("hung" in outcomes) == bool(hangs)
    assert all(e["t"] - start < collective_s / 2 for e in hangs)  # named, not timed out
    assert not [e for e in events if e.get("timed_out")]
    fixed, _ = by_fix(groups["shared_group"])["own_group"]
    assert fixed["verdict"] == "clean", fixed["explanation"]


@pytest.mark.slow
def test_a_dcp_save_over_a_folder_cut_short_loads_as_mixed_though_every_load_returned(groups):
    naive, job = by_fix(groups["overwrite"])["in_place"]
    assert naive["verdict"] == "race", naive["explanation"]
    assert [r["outcome"] for r in naive["ranks"]] == ["mixed", "mixed"], naive["explanation"]
    events = events_of(job)
    assert not [e for e in events if e["event"] == "load_error"]  # every load returned
    resumed = [e for e in events if e["event"] == "resume" and e["attempt"] == 1]
    assert len(resumed) == 2 and all(e["path"].endswith("/last") for e in resumed)
    assert "shard 1 it read as step" in naive["explanation"] or "shard 0 it read as step" in naive["explanation"]
    fixed, _ = by_fix(groups["overwrite"])["fresh_rename"]
    assert fixed["verdict"] == "clean", fixed["explanation"]


@pytest.mark.slow
def test_ctrl_c_while_an_async_save_is_pending_leaves_no_rank_thread_or_process(tmp_path):
    """async_in_flight holds rank 0's epoch-1 save in flight for good (its shard written, nothing committed) and kills
    rank 0 2 s (faults.IN_FLIGHT_S) into that window: a Ctrl-C 0.2 s after rank 0 wrote its shard finds the save
    pending. Every rank stops at once; no save ends after the signal; no process is left."""
    run_dir = tmp_path / "run"

    def in_flight(events):
        return [e for e in events if e["rank"] == 0 and e["event"] == "shard_write" and e["step"] == 20]

    rc, took, sent, out = interrupt(run_dir, [f"hydra.run.dir={run_dir}", "world_size=2", "framework=torch_loop",
                                              "scenario=async_in_flight"], after=0.2, when=in_flight)
    events = events_below(run_dir)
    assert not [e for e in events if e["event"] == "crash"], "rank 0 was killed before the signal came"
    assert not [e for e in events if e["event"] == "save_end" and e["step"] == 20]  # it was never durable
    assert_stopped_at_once(run_dir, rc, took, sent, out)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"] == "interrupted"


def test_async_save_is_refused_in_one_line_where_the_framework_has_no_async_saver():
    import subprocess
    import sys

    from conftest import ROOT

    done = subprocess.run([sys.executable, "-m", "train", "framework=fastai", "checkpoint.async_save=true",
                           "world_size=2"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert lines == ["error: checkpoint.async_save=True: read only by a framework with dcp_async_save or async_top_k; "
                     "this run has framework=fastai, which ignores it: fastai provides no dcp_async_save, an async "
                     "save through torch.distributed.checkpoint.async_save (checkpoint.async_save)"], lines


def test_rename_into_place_leaves_one_whole_checkpoint_and_replaces_the_old(tmp_path):
    from train.fixes import fresh_folder, rename_into_place

    last = tmp_path / "last"
    last.mkdir()
    (last / ".metadata").write_text("old")
    incoming = fresh_folder(last)
    assert incoming.parent == last.parent and incoming.name.startswith(".")  # a listing of epoch folders skips it
    incoming.mkdir()
    (incoming / ".metadata").write_text("new")
    rename_into_place(incoming, last)
    assert (last / ".metadata").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]  # no .old, no incoming left


def test_the_cleanup_after_a_durable_save_never_counts_a_save_a_peer_has_begun(tmp_path):
    """Seen in CI under load: rank 1 dispatched epoch 1's save (dcp made epoch1/) before rank 0, publishing epoch 0,
    listed the folder; with keep_last=1 epoch 0 went, and the kill in epoch 1's window left nothing to resume."""
    from train.frameworks.torch_loop.async_save import outdated

    folders = [tmp_path / f"epoch{k}" for k in range(4)]
    assert outdated(folders, tmp_path / "epoch2", keep=1) == folders[:2]  # epoch3 is in flight: not counted
    assert outdated(folders[:1], tmp_path / "epoch0", keep=1) == []
    assert outdated(folders[:3], tmp_path / "epoch2", keep=2) == folders[:1]
