"""Lightning's own resume after a crash (issue 15, workload=resume), framework=lightning, with real gloo ranks
(world_size=2), real SIGKILLs and torch elastic's own restarts: ModelCheckpoint(save_last=True) every epoch and
trainer.fit(ckpt_path="last") at the start of every attempt, as shipped (pytorch_lightning 2.6.6).

- crash_mid_save: rank 0 is killed halfway through writing epoch 1's checkpoint. Lightning writes into a temporary
  file and moves it onto the name at commit, so the torn bytes stay in the temp folder: the restart resumes from
  last.ckpt (epoch 0) and the run ends clean, as shipped and with agreed.
- pointer_first: last.ckpt as a symlink (save_last="link") is made after the file it names: clean. After the
  restart Lightning leaves that link on epoch 0 and makes last-v1.ckpt for the new ones (observed, asserted).
- cleanup: Lightning deletes old checkpoints on rank 0 alone (DDPStrategy.remove_checkpoint): clean, no restart.
- resume_disagree: every rank finds "last" in its own listing; rank 1's stale one misses last.ckpt, so it starts
  from scratch while rank 0 resumes from epoch 1: the replicas diverge and the run runs out of restarts. agreed
  (rank 0 picks the file, every rank resumes from it): clean.
Every group is one Hydra multirun, the groups of a fixture side by side, with one TMPDIR of their own (where fsspec
puts its temporary files); no run hangs and no process outlives it. The fast fixture has the headline cells
(crash_mid_save as shipped, resume_disagree both ways); the others are slow.
"""
import os
from pathlib import Path

import pytest
import torch

from conftest import sweep_groups

pytestmark = pytest.mark.slow  # Lightning's resume sweeps: real ranks restarting (make test-fast leaves them out; CI runs them)


ENDS_WITHIN_S = 300  # every group of a fixture together; about a minute on 2 idle cores

FAST = {  # the headline cells: a kill mid-write as shipped, and ranks that list the folder differently
    "crash": ["scenario=crash_mid_save", "fix=as_shipped"],
    "disagree": ["scenario=resume_disagree", "fix=as_shipped,agreed"],
}
SLOW = {
    "crash": ["scenario=crash_mid_save", "fix=agreed"],
    "pointer": ["scenario=pointer_first", "fix=as_shipped"],
    "cleanup": ["scenario=cleanup", "fix=as_shipped"],
}


def start(tmp_path_factory, name: str, groups: dict):
    """(group name -> conftest's Launch, the TMPDIR every rank had), every group started together."""
    root = tmp_path_factory.mktemp(name)
    tmp = root / "tmp"
    tmp.mkdir()
    launches = sweep_groups(root, groups, "world_size=2", "framework=lightning", deadline_s=ENDS_WITHIN_S,
                            env={"TMPDIR": str(tmp)})
    return launches, tmp


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    return start(tmp_path_factory, "lightning_resume", FAST)


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    return start(tmp_path_factory, "lightning_resume_slow", SLOW)


def by_fix(launch) -> dict:
    """fix -> (summary.json, the job's dir)."""
    return {s["config"]["fix"]["name"]: (s, job) for s, job in launch.jobs()}


def events_of(job_dir: Path) -> list:
    from train.events import read_events
    return read_events(job_dir)


def loads(path: Path) -> bool:
    try:
        torch.load(path, weights_only=True)
        return True
    except Exception:
        return False


def restarted_once_from_epoch(summary: dict, epoch: int):
    """Clean after one restart, every rank resumed from last.ckpt holding `epoch`, the newest complete save."""
    resume = summary["resume"]
    assert summary["verdict"] == "clean", summary["explanation"]
    assert summary["replicas"] == "agree"
    assert resume["run"] == "finished" and resume["restarts"] == 1, resume
    for rank, resumes in resume["ranks"].items():
        last = resumes[-1]
        assert last["attempt"] == 1 and last["steps_lost"] == 0 and not last["torn"], (rank, resumes)
        assert Path(last["path"]).name == "last.ckpt", (rank, resumes)
        assert Path(last["newest_complete"]).name.startswith(f"epoch={epoch}-"), (rank, resumes)


def epoch_of(events: list, step: int) -> set:
    return {e["epoch"] for e in events if e["event"] == "save_end" and e["step"] == step}


def crash_mid_save_resumes_from_the_last_whole_checkpoint(summary: dict, job: Path):
    restarted_once_from_epoch(summary, 0)
    first = summary["resume"]["attempts"][0]
    assert first["what"].startswith("rank 0 killed with SIGKILL mid write"), first
    assert Path(first["file"]).name.startswith("epoch=1-"), first  # the kill came in epoch 1's own file
    events = events_of(job)
    resumed = [e for e in events if e["event"] == "resume" and e["attempt"] == 1]
    assert len(resumed) == 2 and all(epoch_of(events, e["step"]) == {0} for e in resumed), resumed
    # the torn bytes never got a checkpoint's name: every file in the folder loads
    checkpoints = sorted((job / "models").glob("*.ckpt"))
    assert checkpoints and all(loads(p) for p in checkpoints), checkpoints


def test_crash_mid_save_as_shipped_resumes_from_the_last_whole_checkpoint(fast):
    launches, tmp = fast
    crash_mid_save_resumes_from_the_last_whole_checkpoint(*by_fix(launches["crash"])["as_shipped"])
    # fsspec's transaction wrote the killed save into a temporary file (tempfile.mkstemp: tmp*) in TMPDIR, and
    # nothing removed it: one torn file, which is no checkpoint
    torn = [p for p in tmp.iterdir() if p.name.startswith("tmp") and p.is_file()]
    assert len(torn) == 1 and not loads(torn[0]), sorted(tmp.iterdir())


@pytest.mark.slow
def test_crash_mid_save_agreed_resumes_from_the_last_whole_checkpoint(slow):
    launches, _ = slow
    crash_mid_save_resumes_from_the_last_whole_checkpoint(*by_fix(launches["crash"])["agreed"])


@pytest.mark.slow
def test_pointer_first_the_link_is_made_after_its_file(slow):
    launches, _ = slow
    summary, job = by_fix(launches["pointer"])["as_shipped"]
    restarted_once_from_epoch(summary, 0)
    models = job / "models"
    assert (models / "last.ckpt").is_symlink()
    # as shipped: the restart leaves last.ckpt on epoch 0 and links the newer files as last-v1.ckpt
    assert os.readlink(models / "last.ckpt").startswith("epoch=0-")
    assert (models / "last-v1.ckpt").is_symlink(), sorted(p.name for p in models.iterdir())
    assert os.readlink(models / "last-v1.ckpt").startswith(f"epoch={summary['config']['epochs'] - 1}-")


@pytest.mark.slow
def test_cleanup_rank0_alone_deletes_and_the_run_is_clean(slow):
    launches, _ = slow
    summary, job = by_fix(launches["cleanup"])["as_shipped"]
    assert summary["verdict"] == "clean", summary["explanation"]
    assert summary["resume"]["restarts"] == 0 and summary["replicas"] == "agree"
    events = events_of(job)
    rotated = [e for e in events if e["event"] == "rotate"]
    assert rotated and {e["rank"] for e in rotated} == {0}  # DDPStrategy.remove_checkpoint: global rank 0 only
    assert not [e for e in events if e["event"] == "rotate_error"]
    left = sorted(p.name for p in (job / "models").iterdir())  # save_top_k=1: the newest epoch's, and last.ckpt
    assert len(left) == 2 and left[0].startswith(f"epoch={summary['config']['epochs'] - 1}-"), left
    assert left[1] == "last.ckpt", left


def test_resume_disagree_as_shipped_diverges_and_agreed_is_clean(fast):
    launches, _ = fast
    fixes = by_fix(launches["disagree"])
    naive, job = fixes["as_shipped"]
    assert naive["verdict"] == "race" and naive["replicas"] == "diverged"
    assert naive["resume"]["run"] == "out_of_restarts", naive["resume"]
    split = naive["resume"]["diverged_at_resume"]
    assert split and split[0]["0"] > 0 and split[0]["1"] == 0, split  # rank 0 resumed, rank 1 started over
    events = events_of(job)
    assert any(e["event"] == "stale_listing" and e["rank"] == 1 for e in events)
    fresh = [e for e in events if e["event"] == "resume" and e["rank"] == 1 and e["attempt"] == 1]
    assert fresh and fresh[0]["path"] is None and fresh[0]["listing"] == []
    agreed, _ = fixes["agreed"]
    restarted_once_from_epoch(agreed, 1)
