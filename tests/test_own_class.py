"""callback=own: a checkpoint class of the user's, from outside train/ (examples/my_checkpoints), run through
the scenarios with real ranks; a class that does not import or is of the wrong kind is refused in one line."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

EXAMPLE = "my_checkpoints.fastai_marker.MarkerSaveModelCallback"


def race_lab(cwd, *args, timeout=300):
    """python -m train as a user runs it from their own folder, with their package on PYTHONPATH."""
    return subprocess.run([sys.executable, "-m", "train", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT / "examples")})


def test_the_worked_example_runs_through_three_scenarios(tmp_path):
    """The marker holds for a late writer (seed) and a slow one (torn); an older checkpoint's marker lets
    readers load the older weights (stale): what README's worked example says."""
    sweep = tmp_path / "sweep"
    done = race_lab(tmp_path, "-m", f"hydra.sweep.dir={sweep}", "scenario=seed,torn,stale", "callback=own",
                    f"callback._target_={EXAMPLE}", "world_size=2")
    assert done.returncode == 0, done.stderr[-3000:]
    summaries = {s["config"]["scenario"]: s for s in (json.loads(p.read_text()) for p in sweep.glob("*/summary.json"))}
    assert {name: s["verdict"] for name, s in summaries.items()} == {"seed": "clean", "torn": "clean", "stale": "race"}
    assert [r["outcome"] for r in summaries["stale"]["ranks"]] == ["loaded", "stale"]
    assert "rank 1 loaded an older checkpoint" in summaries["stale"]["explanation"]
    events = [json.loads(line) for line in (next(sweep.glob("*-torn-own-*")) / "events/rank1.jsonl").open()]
    assert [e["how"] for e in events if e["event"] == "sync_exit"] == ["marker"]  # its own sync ran
    assert "| **stale**" in (sweep / "matrix.md").read_text()


def test_a_lightning_checkpoint_io_of_your_own_runs_through_three_scenarios(tmp_path):
    """Lightning's plugin is the user's class under race-lab's observation: its own load ran on every rank."""
    sweep = tmp_path / "sweep"
    done = race_lab(tmp_path, "-m", f"hydra.sweep.dir={sweep}", "framework=lightning",
                    "scenario=seed,stale,save_fails", "callback=own",
                    "callback._target_=my_checkpoints.lightning_io.PatientCheckpointIO", "world_size=2")
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = {json.loads(p.read_text())["config"]["scenario"]: p.parent for p in sweep.glob("*/summary.json")}
    verdicts = {name: json.loads((job / "summary.json").read_text())["verdict"] for name, job in jobs.items()}
    assert verdicts == {"seed": "clean", "stale": "clean", "save_fails": "race"}
    for rank in (0, 1):  # the user's load_checkpoint ran, on each rank, where the load was reached
        logs = "".join(p.read_text() for p in jobs["seed"].glob(f"logs/*/attempt_0/{rank}/stdout.log"))
        assert "PatientCheckpointIO: loading best.ckpt" in logs


@pytest.mark.parametrize("target, says", [
    ("nope.Missing", "callback._target_='nope.Missing': does not import (ModuleNotFoundError: No module named 'nope')"),
    ("collections.OrderedDict", "callback._target_='collections.OrderedDict': is a class of another kind, not a "
                                "subclass of train.callbacks.RaceSaveModelCallback"),
    ("my_checkpoints.fastai_marker", "callback._target_='my_checkpoints.fastai_marker': is a module, not a class"),
    # fastai's callback where Lightning runs: not one of Lightning's kinds
    (EXAMPLE, f"callback._target_='{EXAMPLE}': is a class of another kind, not a subclass of "
              "pytorch_lightning.plugins.TorchCheckpointIO or pytorch_lightning.callbacks.ModelCheckpoint"),
])
def test_a_class_that_does_not_import_or_is_of_the_wrong_kind_is_refused_before_any_rank(tmp_path, target, says):
    run_dir = tmp_path / "run"
    framework = "framework=lightning" if "fastai" in target else "framework=fastai"
    done = race_lab(tmp_path, f"hydra.run.dir={run_dir}", "callback=own", f"callback._target_={target}",
                    "world_size=2", framework)
    assert (done.returncode, done.stderr) == (2, f"error: {says}\n")
    assert not run_dir.exists()
