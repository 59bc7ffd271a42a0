"""Accelerate's own resume (workload=resume, issue 15), framework=accelerate, with real gloo ranks (world_size=2),
real SIGKILLs and torch elastic's own restarts: save_state() with automatic_checkpoint_naming every epoch, and
load_state() at the start of every attempt (train/frameworks/accelerate/resume.py). What was measured:

- crash_mid_save, as shipped: rank 0 is killed halfway through checkpoint_1/model.safetensors; load_state() takes
  the highest checkpoint_<i> with no completeness check, so every restart dies on the torn file (SafetensorError)
  until the restarts run out.
- crash_mid_save, atomic: the model file is never torn, but save_state made checkpoint_1/ before writing into it,
  and load_state() still picks that folder: every restart dies on the missing model file.
- crash_mid_save, manifest: the marker written last is missing in checkpoint_1/: every rank resumes from
  checkpoint_0 (the previous complete epoch), the run restarts once and ends clean.
- cleanup, as shipped: total_limit's deletion runs on the main process only: no FileNotFoundError, clean.
- (slow) crash_mid_save, agreed: rank 0 picks the same torn folder for every rank: the same crash loop.
- (slow) crash_mid_save with total_limit=1: save_state deletes checkpoint_0 BEFORE it writes checkpoint_1, so the
  kill leaves no complete checkpoint at all: even manifest starts over (steps redone, not clean).
Each group is one Hydra multirun, the groups side by side; no run hangs, no process outlives it, and each
attempt's records are there after the SIGKILL.
"""
from pathlib import Path

import pytest

from conftest import sweep_groups
from helpers.compose import composed
from train.launch.plan import not_applicable

pytestmark = pytest.mark.slow  # Accelerate's resume sweeps: real ranks restarting (make test-fast leaves them out; CI runs them)


ENDS_WITHIN_S = 300  # every group together; about a minute on 2 idle cores

GROUPS = {
    "crash": ["scenario=crash_mid_save", "fix=as_shipped,atomic,manifest"],
    "cleanup": ["scenario=cleanup", "fix=as_shipped,rank0_rotates"],
}


def launch(root: Path, groups: dict) -> dict:
    return sweep_groups(root, groups, "world_size=2", "framework=accelerate", deadline_s=ENDS_WITHIN_S)


@pytest.fixture(scope="module")
def groups(tmp_path_factory) -> dict:
    """name -> conftest's Launch, every group started together."""
    return launch(tmp_path_factory.mktemp("accelerate_resume"), GROUPS)


def by_fix(launch) -> dict:
    """fix -> (summary.json, the job's dir)."""
    return {s["config"]["fix"]["name"]: (s, job) for s, job in launch.jobs()}


def events_of(job_dir: Path) -> list:
    from train.events import read_events
    return read_events(job_dir)


def crash_loop_on_checkpoint_1(summary: dict, kind: str):
    """Ran out of restarts: attempt 0 was the kill, every later attempt died resuming from checkpoint_1."""
    resume = summary["resume"]
    assert summary["verdict"] == "race" and resume["run"] == "out_of_restarts", summary["explanation"]
    attempts = resume["attempts"]
    assert len(attempts) == 3  # launch.max_restarts=2: every attempt died
    assert attempts[0]["what"].startswith("rank 0 killed with SIGKILL mid write")
    for later in attempts[1:]:
        assert Path(later["file"]).name == "checkpoint_1" and f"({kind}:" in later["what"], later
    assert "ran out of restarts" in summary["explanation"] and "checkpoint_1" in summary["explanation"]
    assert {r["outcome"] for r in summary["ranks"]} == {kind}


def test_crash_mid_save_as_shipped_runs_out_of_restarts_on_the_torn_model_file(groups):
    summary, job = by_fix(groups["crash"])["as_shipped"]
    crash_loop_on_checkpoint_1(summary, "corrupt")
    assert "SafetensorError" in summary["explanation"]
    # each attempt's records survived: the kill's own event, and a rank_start of every attempt on every rank
    events = events_of(job)
    assert any(e["event"] == "crash" and e["attempt"] == 0 and e["rank"] == 0 for e in events)
    for rank in (0, 1):
        assert sorted(e["attempt"] for e in events if e["rank"] == rank and e["event"] == "rank_start") == [0, 1, 2]
        # load_state() itself chose the torn folder, on every rank, in every restart
        chosen = [Path(e["path"]).name for e in events if e["rank"] == rank and e["event"] == "load_attempt"]
        assert chosen == ["checkpoint_1", "checkpoint_1"], chosen


def test_crash_mid_save_atomic_model_file_still_loops_on_the_folder_made_first(groups):
    summary, _ = by_fix(groups["crash"])["atomic"]
    crash_loop_on_checkpoint_1(summary, "missing")
    assert "FileNotFoundError" in summary["explanation"]


def test_crash_mid_save_manifest_restarts_once_from_the_previous_complete_epoch(groups):
    summary, job = by_fix(groups["crash"])["manifest"]
    resume = summary["resume"]
    assert summary["verdict"] == "clean", summary["explanation"]
    assert summary["replicas"] == "agree"
    assert resume["run"] == "finished" and resume["restarts"] == 1, resume
    steps = {r: resumes[-1]["step"] for r, resumes in resume["ranks"].items()}
    for rank, resumes in resume["ranks"].items():
        assert resumes[-1]["attempt"] == 1 and resumes[-1]["steps_lost"] == 0, (rank, resumes)
        assert Path(resumes[-1]["path"]).name == "checkpoint_0", (rank, resumes)  # the previous complete epoch
    assert len(set(steps.values())) == 1 and steps["0"] > 0
    assert any(e["event"] == "crash" and e["attempt"] == 0 for e in events_of(job))  # the kill did happen


def test_cleanup_as_shipped_rotates_on_the_main_process_only(groups):
    summary, job = by_fix(groups["cleanup"])["as_shipped"]
    assert summary["verdict"] == "clean", summary["explanation"]
    assert summary["resume"]["restarts"] == 0 and summary["replicas"] == "agree"
    rotated = [e for e in events_of(job) if e["event"] == "rotate"]
    assert rotated and {e["rank"] for e in rotated} == {0}  # total_limit=1 deleted old ones, rank 0 alone
    assert not any(e["event"] == "rotate_error" for e in events_of(job))


def test_cells_that_do_not_apply_say_why(groups):
    """The reasons from the plan (what a sweep's n/a job writes as its explanation), and one n/a job of a real
    sweep (the cleanup group's rank0_rotates)."""
    def reason(scenario):
        return not_applicable(composed("framework=accelerate", f"scenario={scenario}", "fix=as_shipped")) or ""
    assert "no pointer" in reason("pointer_first")
    assert "no public seam" in reason("resume_disagree")
    rotates = groups["cleanup"].cell("rank0_rotates")  # left out before the sweep ran: its record (not_run.json)
    assert rotates["verdict"] == "n/a" and "already as shipped" in rotates["explanation"]


SLOW_GROUPS = {
    "agreed": ["scenario=crash_mid_save", "fix=agreed"],
    "limit_1": ["scenario=crash_mid_save", "checkpoint.keep_last=1", "fix=manifest"],
}


@pytest.fixture(scope="module")
def slow_groups(tmp_path_factory) -> dict:
    return launch(tmp_path_factory.mktemp("accelerate_resume_slow"), SLOW_GROUPS)


@pytest.mark.slow
def test_crash_mid_save_agreed_loops_on_the_folder_rank_0_chose(slow_groups):
    crash_loop_on_checkpoint_1(by_fix(slow_groups["agreed"])["agreed"][0], "corrupt")


@pytest.mark.slow
def test_total_limit_deletes_the_last_complete_checkpoint_before_writing_the_next(slow_groups):
    """total_limit=1 with a kill halfway through checkpoint_1: save_state deleted checkpoint_0 first, so no
    complete checkpoint is left; manifest finds none and starts over: steps redone, not clean."""
    summary, job = by_fix(slow_groups["limit_1"])["manifest"]
    assert summary["verdict"] == "race" and summary["resume"]["run"] == "finished", summary["explanation"]
    assert {r["outcome"] for r in summary["ranks"]} == {"stale"}
    for rank, resumes in summary["resume"]["ranks"].items():
        last = resumes[-1]
        assert last["attempt"] == 1 and last["path"] is None and last["steps_lost"] > 0, (rank, resumes)
    events = events_of(job)
    deleted = next(e for e in events if e["event"] == "rotate" and Path(e["path"]).name == "checkpoint_0")
    killed = next(e for e in events if e["event"] == "crash")
    assert deleted["t"] < killed["t"] and Path(killed["path"]).name == "checkpoint_1"
