"""End to end: python -m train with real gloo ranks on this machine, real files, real events. (The fixes' defining
cells, the timeouts and the planted checkpoints run side by side in test_cells.py.)"""
import json
import signal
import subprocess
import sys
import time

import numpy as np
from PIL import Image

from conftest import ROOT, alive, processes_tagged, run_train, tagged_env


def by_event(run, name):
    return {e["rank"]: e for e in run.events if e["event"] == name}


def test_unsynced_seed_scenario_races_and_records_everything(train):
    run = train("callback=unsynced", "expect=race")  # the seed: 3 ranks, rank 0 saves 3 s late
    assert run.rc == 0, run.err[-3000:]
    assert run.outcomes() == {0: "loaded", 1: "missing", 2: "missing"}

    s = run.summary
    assert s["verdict"] == "race"
    assert s["explanation"].startswith("race: ranks 1, 2 tried to load ")
    assert " before rank 0 finished saving (FileNotFoundError)" in s["explanation"]
    for r in (1, 2):
        assert s["ranks"][r]["timings"]["load_after_save_end"] < -1.0  # read well before the save ended
    assert (s["plan"]["device"], s["plan"]["backend"]) == ("cpu", "gloo")
    assert s["config"]["world_size"] == 3 and s["config"]["skew"] == {"seconds": 3.0, "rank": 0, "mid_write_s": 0.0}
    assert s["config"]["scenario"] == "seed"
    env = s["environment"]
    assert env["torch"] and env["fastai"] == "2.8.12" and env["python"] and env["host"]
    assert set(env["git"]) == {"sha", "dirty"}

    # the run dir: hydra config, each rank's events and logs, the checkpoint
    assert (run.dir / ".hydra/config.yaml").exists()
    assert sorted(p.name for p in (run.dir / "events").iterdir()) == \
        ["launcher.jsonl", "rank0.jsonl", "rank1.jsonl", "rank2.jsonl"]
    assert len(list(run.dir.glob("logs/*/attempt_0/*/stdout.log"))) == 3
    assert (run.dir / "models/best.pth").stat().st_size > 0

    # fastai really trained with DDP over gloo: every rank wrapped, each on its own shard
    starts = by_event(run, "fit_start")
    assert all(starts[r]["ddp"] for r in range(3))
    assert len({starts[r]["train_batches"] for r in range(3)}) == 1

    # the console: fastai's table from one rank, each rank's load lines, the outcome table
    assert run.out.count("train_loss") == 1
    assert run.out.count("Attempting to load model.") == 3
    assert "rank 0: Model saved." in run.out and "rank 0: Loaded model." in run.out
    assert run.out.count("Load failed: FileNotFoundError") == 2
    assert "rank  outcome" in run.out and s["explanation"] in run.out
    assert not alive(run.rank_pids())


def test_barrier_seed_scenario_is_clean_and_loads_wait_for_the_save(train):
    run = train("callback=barrier", "expect=clean")
    assert run.rc == 0, run.err[-3000:]
    assert run.outcomes() == {0: "loaded", 1: "loaded", 2: "loaded"}
    assert run.summary["explanation"].startswith("clean: every rank loaded the last checkpoint rank 0 wrote")
    save_end = by_event(run, "save_end")[0]["t"]
    attempts = by_event(run, "load_attempt")
    for r in (1, 2):
        assert attempts[r]["t"] >= save_end
        assert run.summary["ranks"][r]["timings"]["wait"] > 1.5  # they waited out rank 0's skew
    # the seed's console: ranks 1 and 2 announce the load, rank 0 saves, then everyone loads
    assert run.out.count("Loaded model.") == 3


def test_an_older_checkpoint_is_read_as_stale_and_expect_mismatch_exits_1(train):
    run = train("scenario=stale", "callback=unsynced", "world_size=2", "expect=clean")
    assert run.rc == 1
    assert "expected clean, got race" in run.err
    assert run.outcomes() == {0: "loaded", 1: "stale"}
    assert "loaded an older checkpoint (the epoch-" in run.summary["explanation"]


def test_a_crashed_rank_leaves_its_events_and_no_process(train):
    run = train("callback=barrier", "fault.crash_rank=0")
    assert run.rc == 0, run.err[-3000:]
    assert run.outcomes() == {0: "crashed", 1: "aborted", 2: "aborted"}
    assert run.summary["status"] == "failed"
    assert run.summary["verdict"] == "race"
    for r in range(3):  # every rank's records survived
        names = [e["event"] for e in run.events if e["rank"] == r]
        assert names[:2] == ["rank_start", "fit_start"]
    assert by_event(run, "crash")[0]
    assert not alive(run.rank_pids())
    assert not processes_tagged(str(run.dir))  # nor the forkserver the ranks came from


def test_a_run_dir_that_holds_a_run_is_refused_before_any_rank(train):
    first = train("world_size=1", "skew.seconds=0")
    assert first.rc == 0, first.err[-3000:]
    before = (first.dir / "summary.json").read_bytes()
    again = run_train(first.dir, "world_size=1")
    assert again.rc == 2
    assert again.err.strip().splitlines() == \
        [f"error: hydra.run.dir={first.dir}: already holds a run; give each run its own dir"]
    assert (first.dir / "summary.json").read_bytes() == before  # the first result is untouched


def test_mnist_sample_goes_through_fastais_untar_data_and_image_loaders(train, tmp_path):
    """Offline, so the data set is a small stand-in where untar_data keeps MNIST_SAMPLE."""
    rng = np.random.RandomState(0)
    for split, n in (("train", 24), ("valid", 8)):
        for label, shift in (("3", 0), ("7", 60)):
            folder = tmp_path / "fastai/data/mnist_sample" / split / label
            folder.mkdir(parents=True)
            for i in range(n):
                Image.fromarray((rng.rand(28, 28) * 190).astype("uint8") + shift).save(folder / f"{i}.png")
    run = train("data=mnist_sample", "data.batch_size=16", "world_size=2", "epochs=1",
                env={"FASTAI_HOME": str(tmp_path / "fastai")})
    assert run.rc == 0, run.err[-3000:]
    assert run.outcomes() == {0: "loaded", 1: "missing"}
    assert by_event(run, "fit_start")[0]["train_batches"] == 2  # 48 images in 3 batches, shared by two ranks
