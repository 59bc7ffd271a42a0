"""Resume after a crash (issue 15), framework=torch_loop, with real gloo ranks (world_size=2), real SIGKILLs and
torch elastic's own restarts (launch.max_restarts, set by each scenario):

- crash_mid_save: rank 0 is killed halfway through epoch 1's checkpoint. The loop that writes in place resumes
  from the torn file, dies on it at every restart and runs out of restarts, and the summary names the file; with
  atomic, dcp and manifest it restarts once, every rank resumes from epoch 0 (the previous complete one) and the run
  ends clean with agreeing replicas.
- pointer_first: `latest` names the checkpoint before it is complete: not clean, nor with an atomic file (the
  pointer names a file never renamed into place); written last (manifest): clean.
- cleanup: every rank deletes the old checkpoint: FileNotFoundError, not clean; rank 0 alone after a barrier: clean.
- resume_disagree: rank 1's stale listing misses the newest checkpoint: the replicas diverge; agreed: clean.
Every group is one Hydra multirun, the groups side by side; no run hangs, no process outlives it, and each
attempt's records are there after the SIGKILL.
"""
from pathlib import Path

import pytest

from conftest import sweep_groups

pytestmark = pytest.mark.slow  # the torch loop's resume sweeps: real ranks restarting (make test-fast leaves them out; CI runs them)


ENDS_WITHIN_S = 300  # every group together; about a minute on 2 idle cores

GROUPS = {
    "crash": ["scenario=crash_mid_save", "fix=in_place,atomic,dcp,manifest"],
    "pointer": ["scenario=pointer_first", "fix=in_place,atomic,manifest"],
    "cleanup": ["scenario=cleanup", "fix=in_place,rank0_rotates"],
    "disagree": ["scenario=resume_disagree", "fix=in_place,agreed"],
}


@pytest.fixture(scope="module")
def groups(tmp_path_factory) -> dict:
    """name -> conftest's Launch, every group started together."""
    root = tmp_path_factory.mktemp("resume")
    return sweep_groups(root, GROUPS, "world_size=2", "framework=torch_loop", deadline_s=ENDS_WITHIN_S)


def by_fix(launch) -> dict:
    """fix -> (summary.json, the job's dir)."""
    return {s["config"]["fix"]["name"]: (s, job) for s, job in launch.jobs()}


def events_of(job_dir: Path) -> list:
    from train.events import read_events
    return read_events(job_dir)


def restarted_once_from_epoch0(summary: dict):
    resume = summary["resume"]
    assert summary["verdict"] == "clean", summary["explanation"]
    assert summary["replicas"] == "agree"
    assert resume["run"] == "finished" and resume["restarts"] == 1, resume
    for rank, resumes in resume["ranks"].items():
        assert resumes[-1]["attempt"] == 1 and resumes[-1]["steps_lost"] == 0, (rank, resumes)
        assert Path(resumes[-1]["path"]).name.startswith("epoch0"), (rank, resumes)  # the previous complete epoch


def test_crash_mid_save_in_place_runs_out_of_restarts_on_the_torn_file(groups):
    summary, job = by_fix(groups["crash"])["in_place"]
    resume = summary["resume"]
    assert summary["verdict"] == "race" and resume["run"] == "out_of_restarts"
    attempts = resume["attempts"]
    assert len(attempts) == 3  # launch.max_restarts=2: every attempt died
    assert attempts[0]["what"].startswith("rank 0 killed with SIGKILL")
    for later in attempts[1:]:  # each restart died reading the torn file, and the summary says which
        assert Path(later["file"]).name == "epoch1.pt" and "corrupt" in later["what"], later
    assert "ran out of restarts" in summary["explanation"] and "epoch1.pt" in summary["explanation"]
    # each attempt's records survived: the kill's own event, and a rank_start of every attempt on every rank
    events = events_of(job)
    assert any(e["event"] == "crash" and e["attempt"] == 0 and e["rank"] == 0 for e in events)
    for rank in (0, 1):
        assert sorted(e["attempt"] for e in events if e["rank"] == rank and e["event"] == "rank_start") == [0, 1, 2]


@pytest.mark.parametrize("fix", ["atomic", "dcp", "manifest"])
def test_crash_mid_save_atomic_dcp_and_manifest_restart_once_and_end_clean(groups, fix):
    summary, job = by_fix(groups["crash"])[fix]
    restarted_once_from_epoch0(summary)
    assert any(e["event"] == "crash" and e["attempt"] == 0 for e in events_of(job))  # the kill did happen


def test_pointer_first_is_not_clean_and_the_pointer_written_last_is(groups):
    runs = by_fix(groups["pointer"])
    first, _ = runs["in_place"]
    assert first["verdict"] == "race" and first["resume"]["run"] == "out_of_restarts"
    assert Path(first["resume"]["attempts"][1]["file"]).name == "epoch1.pt"  # where the pointer led
    restarted_once_from_epoch0(runs["manifest"][0])


def test_pointer_first_with_an_atomic_file_follows_the_pointer_to_a_file_never_renamed(groups):
    # atomic makes the file whole or absent, but the pointer written first still names it: missing, a crash loop
    summary, _ = by_fix(groups["pointer"])["atomic"]
    assert summary["verdict"] == "race" and summary["resume"]["run"] == "out_of_restarts"
    later = summary["resume"]["attempts"][1]
    assert Path(later["file"]).name == "epoch1.pt" and later["error_type"] == "FileNotFoundError", later


def test_cleanup_every_rank_deleting_names_the_file_not_found(groups):
    runs = by_fix(groups["cleanup"])
    every, _ = runs["in_place"]
    assert every["verdict"] == "race" and every["resume"]["run"] == "out_of_restarts"
    assert "FileNotFoundError" in every["explanation"]
    assert all(a["error_type"] == "FileNotFoundError" for a in every["resume"]["attempts"])
    once, _ = runs["rank0_rotates"]
    assert once["verdict"] == "clean", once["explanation"]
    assert once["resume"]["restarts"] == 0 and once["replicas"] == "agree"


def test_resume_disagree_diverges_and_agreed_is_clean(groups):
    runs = by_fix(groups["disagree"])
    naive, _ = runs["in_place"]
    assert naive["verdict"] == "race" and naive["replicas"] == "diverged"
    split = naive["resume"]["diverged_at_resume"]
    assert split and split[0]["0"] != split[0]["1"]  # the ranks resumed from different steps
    assert "diverged" in naive["explanation"]
    agreed, _ = runs["agreed"]
    assert agreed["verdict"] == "clean", agreed["explanation"]
    assert agreed["replicas"] == "agree" and agreed["resume"]["restarts"] == 1
