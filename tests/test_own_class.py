"""callback=own: a checkpoint class of the user's, from outside train/ (examples/my_checkpoints), run through
the scenarios with real ranks, for fastai, Lightning and the Trainer; a class that does not import or is of the
wrong kind is refused in one line before any rank starts."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, side_by_side, sweep_command

EXAMPLE = "my_checkpoints.fastai_marker.MarkerSaveModelCallback"
USER_PATH = {"PYTHONPATH": str(ROOT / "examples")}  # the user's package, outside this repository's train/
EXAMPLES = {  # framework -> (the class, the scenarios it runs through)
    "fastai": (EXAMPLE, "scenario=seed,torn,stale"),
    "lightning": ("my_checkpoints.lightning_io.PatientCheckpointIO", "scenario=seed,stale,save_fails"),
    "transformers": ("my_checkpoints.trainer_callback.SayBest", "scenario=seed,stale,save_fails"),
}


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> dict:
    """framework -> scenario -> (summary.json, job dir): the three examples' sweeps, side by side, each run from
    a folder outside the repository as a user runs it."""
    root = tmp_path_factory.mktemp("own")
    launches = side_by_side(root, {
        name: sweep_command(root / name, f"framework={name}", scenarios, "callback=own", f"callback._target_={target}",
                            "world_size=2") for name, (target, scenarios) in EXAMPLES.items()},
        deadline_s=420, cwd=root, env=USER_PATH)
    out = {}
    for name, launch in launches.items():
        assert launch.rc == 0, launch.out[-3000:]
        out[name] = {s["config"]["scenario"]: (s, job) for s, job in launch.jobs()}
    return out


def verdicts(jobs) -> dict:
    return {scenario: s["verdict"] for scenario, (s, _) in jobs.items()}


def rank_logs(job, rank) -> str:
    return "".join(p.read_text() for p in job.glob(f"logs/*/attempt_0/{rank}/stdout.log"))


def test_a_fastai_callback_of_your_own_runs_through_three_scenarios(examples):
    """The marker holds for a late writer (seed) and a slow one (torn); an older checkpoint's marker lets
    readers load the older weights (stale): what README's worked example says."""
    jobs = examples["fastai"]
    assert verdicts(jobs) == {"seed": "clean", "torn": "clean", "stale": "race"}
    stale, _ = jobs["stale"]
    assert [r["outcome"] for r in stale["ranks"]] == ["loaded", "stale"]
    assert "rank 1 loaded an older checkpoint" in stale["explanation"]
    events = [json.loads(line) for line in (jobs["torn"][1] / "events/rank1.jsonl").open()]
    assert [e["how"] for e in events if e["event"] == "sync_exit"] == ["marker"]  # its own sync ran


def test_a_lightning_checkpoint_io_of_your_own_runs_through_three_scenarios(examples):
    """Lightning's plugin is the user's class under race-lab's observation: its own load ran on every rank."""
    jobs = examples["lightning"]
    assert verdicts(jobs) == {"seed": "clean", "stale": "clean", "save_fails": "race"}
    for rank in (0, 1):
        assert "PatientCheckpointIO: loading best.ckpt" in rank_logs(jobs["seed"][1], rank)


def test_a_trainer_callback_of_your_own_runs_through_three_scenarios(examples):
    jobs = examples["transformers"]
    assert verdicts(jobs) == {"seed": "clean", "stale": "clean", "save_fails": "race"}
    for rank in (0, 1):
        assert f"SayBest: process {rank}: best checkpoint-" in rank_logs(jobs["seed"][1], rank)


def race_lab(cwd, *args, timeout=300):
    """python -m train as a user runs it from their own folder, with their package on PYTHONPATH."""
    return subprocess.run([sys.executable, "-m", "train", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **USER_PATH})


@pytest.mark.parametrize("framework, target, says", [
    ("fastai", "nope.Missing", "does not import (ModuleNotFoundError: No module named 'nope')"),
    ("fastai", "collections.OrderedDict", "is a class of another kind, not a subclass of "
                                          "train.frameworks.fastai.callbacks.RaceSaveModelCallback"),
    ("fastai", "my_checkpoints.fastai_marker", "is a module, not a class"),
    ("lightning", EXAMPLE, "is a class of another kind, not a subclass of pytorch_lightning.plugins.TorchCheckpointIO "
                           "or pytorch_lightning.callbacks.ModelCheckpoint"),  # fastai's, where Lightning runs
])
def test_a_class_that_does_not_import_or_is_of_the_wrong_kind_is_refused_before_any_rank(tmp_path, framework, target,
                                                                                          says):
    run_dir = tmp_path / "run"
    done = race_lab(tmp_path, f"hydra.run.dir={run_dir}", "callback=own", f"callback._target_={target}",
                    "world_size=2", f"framework={framework}")
    assert (done.returncode, done.stderr) == (2, f"error: callback._target_={target!r}: {says}\n")
    assert not run_dir.exists()
