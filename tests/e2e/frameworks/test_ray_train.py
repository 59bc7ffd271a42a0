"""framework=ray_train (ray 2.60's TorchTrainer, 2 CPU workers over gloo), run as users run it: each run's driver
starts a lean local Ray and shuts it down. scenario=shard_lost: rank 1 is killed inside Ray's upload of its part of
epoch 1's checkpoint, once rank 0's part is on storage; Ray restarts both workers (FailureConfig).
- as shipped (Ray's own resume, ray.train.get_checkpoint): both resume from epoch 0's folder, clean; the partial
  folder stays on storage, the newest there, with rank 0's part only;
- in_place (the resume from the newest folder, as after a driver crash): a race naming that folder and rank 1's
  missing part;
- rank0_leads (the helper users copy): both resume from epoch 0's folder, the one with its marker, clean.
The three runs start side by side (each its own Ray); none leaves a process. A Ctrl-C to a run's process group,
and the run's time limit, leave no Ray process (raylet, GCS, workers) either. Each Ray start takes most of a minute on a loaded 2-core
machine: about 3 minutes together.
"""
import glob
import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, processes_tagged, side_by_side, tagged_env, train_command
from helpers.interrupts import interrupt

ENDS_WITHIN_S = 480
RUN = ["framework=ray_train", "world_size=2", "scenario=shard_lost", "epochs=2", "launch.max_restarts=1",
       "checkpoint.keep_last=1"]  # CheckpointConfig(num_to_keep=1)
FIXES = ("as_shipped", "in_place", "rank0_leads")
TEMP_DIRS = f"{tempfile.gettempdir()}/race-lab-ray-*"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("ray_train")
    launched = side_by_side(root, {fix: (train_command(root / fix, *RUN, f"fix={fix}"), root / fix) for fix in FIXES},
                            ENDS_WITHIN_S)
    for launch in launched.values():
        launch.ended()  # within the deadline, and no process left (Ray's included: they carry the run's tag)
    return {fix: launch.dir for fix, launch in launched.items()}


def summary_and_events(run_dir: Path):
    from train.events import read_events

    return json.loads((run_dir / "summary.json").read_text()), read_events(run_dir)


def folders(run_dir: Path) -> dict:
    """Each checkpoint folder on storage -> the names in it."""
    return {p.name: sorted(f.name for f in p.iterdir()) for p in sorted((run_dir / "models").glob("checkpoint_*"))
            if p.is_dir()}


@pytest.mark.slow  # three runs of real Ray: make test-fast leaves them out
def test_a_worker_killed_in_its_upload_leaves_a_partial_newest_folder_that_ray_skips_and_in_place_loads(runs):
    shipped, events = summary_and_events(runs["as_shipped"])
    crash = next(e for e in events if e["event"] == "crash")
    assert (crash["rank"], crash["at"], crash["attempt"]) == (1, "before_shard", 0)
    assert shipped["verdict"] == "clean", shipped["explanation"]
    resumed = {e["rank"]: Path(e["path"]).name for e in events if e["event"] == "resume" and e["attempt"] == 1}
    saved = [Path(e["path"]).name for e in events if e["event"] == "save_end"]  # whole: every worker reported
    assert resumed == {0: saved[0], 1: saved[0]}, (resumed, saved)  # Ray's record: epoch 0's
    on_storage = folders(runs["as_shipped"])
    partial = [name for name, files in on_storage.items() if files == ["rank_0.pt"]]
    # num_to_keep=1 deleted epoch 0's folder once epoch 1's whole one was recorded; never the partial one
    assert list(on_storage) == [partial[0], saved[-1]] and partial[0] < saved[-1], on_storage

    naive, events = summary_and_events(runs["in_place"])
    assert naive["verdict"] == "race", naive["explanation"]
    errors = [e for e in events if e["event"] == "load_error"]
    assert errors and {(e["rank"], e["error_type"]) for e in errors} == {(1, "FileNotFoundError")}, errors
    partial = [name for name, files in folders(runs["in_place"]).items() if files == ["rank_0.pt"]]
    assert {e["path"] for e in errors} == {str(runs["in_place"] / "models" / partial[0] / "rank_1.pt")}
    assert f"{partial[0]}/rank_1.pt" in naive["explanation"], naive["explanation"]


@pytest.mark.slow  # the `runs` fixture: three runs of real Ray
def test_rank0_leads_resumes_every_worker_from_the_newest_folder_with_its_marker(runs):
    fixed, events = summary_and_events(runs["rank0_leads"])
    assert fixed["verdict"] == "clean", fixed["explanation"]
    assert any(e["event"] == "crash" for e in events)  # the kill did happen
    saved = [Path(e["path"]).name for e in events if e["event"] == "save_end"]
    resumed = {e["rank"]: Path(e["path"]).name for e in events if e["event"] == "resume" and e["attempt"] == 1}
    assert resumed == {0: saved[0], 1: saved[0]}, (resumed, saved)  # epoch 0's, the newest with its marker
    marked = [name for name, files in folders(runs["rank0_leads"]).items() if ".complete" in files]
    assert marked == [saved[-1]]  # num_to_keep=1: epoch 1's, the last whole one

@pytest.mark.slow  # real Ray, stopped by a Ctrl-C and by the run's time limit, side by side
def test_a_ctrl_c_or_the_time_limit_leaves_no_ray_process(tmp_path):
    """The driver leads a session of its own, which every Ray process inherits; a stopped driver kills it whole
    (train/process.py end_own_session): without it, Ray workers still starting when their raylet died outlived a
    run stopped at its limit by up to a minute."""
    limited, interrupted = tmp_path / "limited", tmp_path / "interrupted"
    temp_dirs = set(glob.glob(TEMP_DIRS))  # Ray's, where the run dir is too long for its sockets (driver.py)
    endless = ["framework=ray_train", "world_size=2", "scenario=cleanup", "epochs=10000", "timeout.run_s=60"]
    timed = subprocess.Popen(train_command(limited, *endless), cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=tagged_env(str(limited)))
    try:
        rc, _, _, out = interrupt(interrupted, [f"hydra.run.dir={interrupted}", *RUN, "fix=as_shipped"], after=0.5)
        assert rc == 130, out[-3000:]
        assert timed.wait(timeout=240) == 0
    finally:
        if timed.poll() is None:
            timed.kill()
    assert json.loads((limited / "summary.json").read_text())["status"] == "timeout"
    for run_dir in (interrupted, limited):
        assert not processes_tagged(str(run_dir)), run_dir
    assert set(glob.glob(TEMP_DIRS)) <= temp_dirs  # removed by the stopped driver too
