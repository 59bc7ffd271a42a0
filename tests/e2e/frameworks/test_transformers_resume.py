"""The Trainer's OWN resume after a crash (issue 15), framework=transformers workload=resume, with real gloo ranks
(world_size=2), real SIGKILLs and torch elastic's own restarts: train(resume_from_checkpoint=get_last_checkpoint(
output_dir)) at the start of every attempt, as shipped (transformers 5.23.0), and the fixes at its seams.

- crash_mid_save: rank 0 is killed halfway through epoch 1's model.safetensors. As shipped, get_last_checkpoint
  takes that checkpoint-<step> folder (it checks nothing in it), every restart dies on the torn file and the run
  runs out of restarts. atomic does not save it: the folder exists before its model file, so the restarts die on
  the missing file (the Trainer's ValueError). agreed neither: rank 0 picks the same folder. manifest (a marker
  written after the whole checkpoint, the newest complete one resumed) restarts once from epoch 0: clean.
- resume_disagree: rank 1's stale listing misses epoch 1's folder: the ranks resume from different steps (the
  digest is taken at the Trainer's read, before DDP copies rank 0's weights), diverge; agreed: clean.
- cleanup: the Trainer's rotation (save_total_limit=1) runs on process 0 alone: clean as shipped.
Every group is one Hydra multirun, the groups side by side; no run hangs, no process outlives it. The crash loops
of atomic and agreed are slow (-m slow).
"""
from pathlib import Path

import pytest

from conftest import sweep_groups
from helpers.compose import composed
from train.launch.plan import not_applicable

pytestmark = pytest.mark.slow  # the Trainer's resume sweeps: real ranks restarting (make test-fast leaves them out; CI runs them)

ENDS_WITHIN_S = 300  # every group together; under a minute on 2 idle cores

GROUPS = {
    "crash": ["scenario=crash_mid_save", "fix=as_shipped,manifest"],
    "disagree": ["scenario=resume_disagree", "fix=as_shipped,agreed"],
    "cleanup": ["scenario=cleanup", "fix=as_shipped"],
}
# the fixes that do not hold, in crash loops of their own (slow)
MORE = {"crash": ["scenario=crash_mid_save", "fix=atomic,agreed"]}


def started(tmp_path_factory, name: str, groups: dict) -> dict:
    """name -> conftest's Launch, every group started together."""
    root = tmp_path_factory.mktemp(name)
    return sweep_groups(root, groups, "world_size=2", "framework=transformers", deadline_s=ENDS_WITHIN_S)


@pytest.fixture(scope="module")
def groups(tmp_path_factory) -> dict:
    return started(tmp_path_factory, "transformers_resume", GROUPS)


@pytest.fixture(scope="module")
def more(tmp_path_factory) -> dict:
    return started(tmp_path_factory, "transformers_resume_more", MORE)


def by_fix(launch) -> dict:
    """fix -> (summary.json, the job's dir); launch.jobs() asserts the launch ended and left no process."""
    return {s["config"]["fix"]["name"]: (s, job) for s, job in launch.jobs()}


def events_of(job_dir: Path) -> list:
    from train.events import read_events
    return read_events(job_dir)


def saved(events, epoch: int) -> str:
    """The checkpoint folder rank 0 began to save for `epoch` in the first attempt."""
    return next(e["path"] for e in events if e["event"] == "save_start" and e["epoch"] == epoch and e["attempt"] == 0)


def crash_loop_on(summary: dict, job: Path, kind: str):
    """Every restart died resuming from epoch 1's folder (`kind`: corrupt, missing) until the restarts ran out."""
    resume, torn = summary["resume"], saved(events_of(job), 1)
    assert summary["verdict"] == "race" and resume["run"] == "out_of_restarts", summary["explanation"]
    attempts = resume["attempts"]
    assert len(attempts) == 3  # launch.max_restarts=2: every attempt died
    assert attempts[0]["what"].startswith("rank 0 killed with SIGKILL")
    for later in attempts[1:]:
        assert later["file"] == torn and f"({kind}:" in later["what"], later
    assert "ran out of restarts" in summary["explanation"] and Path(torn).name in summary["explanation"]


def test_crash_mid_save_as_shipped_resumes_the_torn_folder_until_the_restarts_run_out(groups):
    summary, job = by_fix(groups["crash"])["as_shipped"]
    crash_loop_on(summary, job, "corrupt")
    assert "SafetensorError" in summary["explanation"]


@pytest.mark.slow
def test_crash_mid_save_atomic_leaves_a_folder_without_its_model_file_and_still_loops(more):
    summary, job = by_fix(more["crash"])["atomic"]
    crash_loop_on(summary, job, "missing")
    torn = Path(saved(events_of(job), 1))
    assert torn.is_dir() and not (torn / "model.safetensors").exists()  # what get_last_checkpoint took
    assert "Can't find a valid checkpoint" in summary["explanation"]


@pytest.mark.slow
def test_crash_mid_save_agreed_loops_too_rank0_picks_the_same_folder(more):
    summary, job = by_fix(more["crash"])["agreed"]
    crash_loop_on(summary, job, "corrupt")


def test_crash_mid_save_manifest_restarts_once_from_epoch0_and_ends_clean(groups):
    summary, job = by_fix(groups["crash"])["manifest"]
    resume = summary["resume"]
    assert summary["verdict"] == "clean", summary["explanation"]
    assert summary["replicas"] == "agree" and resume["run"] == "finished" and resume["restarts"] == 1
    events = events_of(job)
    assert any(e["event"] == "crash" and e["attempt"] == 0 and e["rank"] == 0 for e in events)  # the kill happened
    for rank, resumes in resume["ranks"].items():  # each rank's last resume: epoch 0's folder, nothing lost
        last = resumes[-1]
        assert last["attempt"] == 1 and last["path"] == saved(events, 0) and last["steps_lost"] == 0, (rank, last)


def test_resume_disagree_as_shipped_diverges_and_agreed_is_clean(groups):
    runs = by_fix(groups["disagree"])
    naive, job = runs["as_shipped"]
    assert naive["verdict"] == "race" and naive["replicas"] == "diverged", naive["explanation"]
    split = naive["resume"]["diverged_at_resume"]
    events = events_of(job)
    steps = {e["step"] for e in events if e["event"] == "save_end" and e["attempt"] == 0}
    assert split and split[0]["0"] == max(steps) and split[0]["1"] == min(steps)  # rank 1 missed the newest
    assert any(e["event"] == "stale_listing" and e["rank"] == 1 for e in events)
    agreed, _ = runs["agreed"]
    assert agreed["verdict"] == "clean", agreed["explanation"]
    assert agreed["replicas"] == "agree" and agreed["resume"]["restarts"] == 1
    assert {r[-1]["step"] for r in agreed["resume"]["ranks"].values()} == {max(steps)}


def test_cleanup_as_shipped_rotates_on_rank0_alone_and_is_clean(groups):
    summary, job = by_fix(groups["cleanup"])["as_shipped"]
    assert summary["verdict"] == "clean", summary["explanation"]
    assert summary["resume"]["restarts"] == 0 and summary["replicas"] == "agree"
    events = events_of(job)
    rotated = [e for e in events if e["event"] == "rotate"]
    assert rotated and {e["rank"] for e in rotated} == {0}
    assert not any(e["event"] == "rotate_error" for e in events)
    assert [p.name for p in (job / "models").iterdir()] == [Path(saved(events, 2)).name]  # save_total_limit=1


@pytest.mark.parametrize("overrides, reason", [
    (["scenario=pointer_first", "fix=as_shipped"], "needs pointer; transformers has none: the Trainer keeps no pointer"),
    (["scenario=cleanup", "fix=rank0_rotates"], "already as shipped: the Trainer's rotation"),
    (["scenario=crash_mid_save", "fix=dcp"], "torch.distributed.checkpoint would replace the Trainer's save"),
    (["scenario=crash_mid_save", "fix=in_place"], "the naive resume loop of framework=torch_loop"),
])
def test_the_trainer_s_n_a_resume_cells_say_why(overrides, reason):
    assert (not_applicable(composed("framework=transformers", *overrides)) or "").startswith(reason)


def test_the_resume_cells_it_has_are_run():
    for scenario in ("crash_mid_save", "cleanup", "resume_disagree"):
        for fix in ("as_shipped", "manifest", "agreed"):
            assert not_applicable(composed("framework=transformers", f"scenario={scenario}", f"fix={fix}")) is \
                None, (scenario, fix)
