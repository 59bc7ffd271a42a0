"""End to end: python -m train with real gloo ranks on this machine, real files, real events. (The fixes' defining
cells, the timeouts and the planted checkpoints run side by side in test_cells.py.)

The runs start together from one fixture (side by side: most of their time is start-up and stalls, not the
cores); each test reads its own. A run that does not end in time is stopped and its test fails."""
import numpy as np
import pytest
from PIL import Image

from conftest import Run, alive, console_noise, processes_tagged, run_train, together, train_command
from train.judge.vocabulary import secs

ENDS_WITHIN_S = 300  # every run together; each takes well under half a minute on 2 idle cores

RUNS = {
    "unsynced": ["fix=unsynced", "expect=race"],  # the seed: 3 ranks, rank 0 saves 3 s late
    "barrier": ["fix=barrier", "expect=clean"],
    "stale": ["scenario=stale", "fix=unsynced", "world_size=2", "expect=clean"],
    "crash": ["fix=barrier", "fault.crash_rank=0"],
    "first": ["world_size=1", "skew.seconds=0"],
    "mnist_sample": ["data=mnist_sample", "data.batch_size=16", "world_size=2", "epochs=1"],
    # make matrix's and race-lab check's skew: it ends once every other rank is past its load or waiting
    "settled_race": ["fix=unsynced", "world_size=2", "skew.seconds=20", "skew.end_when_settled=true", "expect=race"],
    "settled_clean": ["fix=barrier", "world_size=2", "skew.seconds=20", "skew.end_when_settled=true", "expect=clean"],
}


def by_event(run, name):
    return {e["rank"]: e for e in run.events if e["event"] == name}


def mnist_sample_stand_in(fastai_home):
    """Offline, so the data set is a small stand-in where untar_data keeps MNIST_SAMPLE."""
    rng = np.random.RandomState(0)
    for split, n in (("train", 24), ("valid", 8)):
        for label, shift in (("3", 0), ("7", 60)):
            folder = fastai_home / "data/mnist_sample" / split / label
            folder.mkdir(parents=True)
            for i in range(n):
                Image.fromarray((rng.rand(28, 28) * 190).astype("uint8") + shift).save(folder / f"{i}.png")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """name -> conftest's Run of each of RUNS, started together and waited for."""
    root = tmp_path_factory.mktemp("race")
    mnist_sample_stand_in(root / "fastai")
    extra = {"mnist_sample": {"FASTAI_HOME": str(root / "fastai")}}
    done = together(root, {name: (train_command(root / name, *overrides), root / name, extra.get(name))
                           for name, overrides in RUNS.items()}, ENDS_WITHIN_S)
    return {name: Run(proc, root / name) for name, proc in done.items()}


def test_unsynced_seed_scenario_races_and_records_everything(runs):
    run = runs["unsynced"]  # the seed: 3 ranks, rank 0 saves 3 s late
    assert run.rc == 0, run.err[-3000:]
    assert run.outcomes() == {0: "loaded", 1: "missing", 2: "missing"}

    s = run.summary
    assert s["verdict"] == "race"
    assert s["explanation"].startswith("race: ranks 1, 2 tried to load ")
    assert " before rank 0 finished saving (FileNotFoundError)" in s["explanation"]
    for r in (1, 2):
        assert s["ranks"][r]["timings"]["load_after_save_end"] < -1.0  # read well before the save ended
    assert (s["plan"]["device"], s["plan"]["backend"]) == ("cpu", "gloo")
    assert s["config"]["world_size"] == 3 and s["config"]["skew"] == {"seconds": 3.0, "rank": 0, "mid_write_s": 0.0,
                                                                                "end_when_settled": False}
    assert s["config"]["scenario"] == "seed"
    env = s["environment"]
    assert env["torch"] and env["fastai"] == "2.8.12" and env["python"] and env["host"]
    assert env["framework"] == {"name": "fastai", "distribution": "fastai", "version": "2.8.12"}  # its contract's
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

    # what every rank did to the file, seen by its audit hook (train/rank/observe.py), and what watching cost it
    reads = [e for e in run.events if e["event"] == "file_op" and e["op"] == "open" and e["mode"] == "r"]
    assert {(e["rank"], e["exists"]) for e in reads if e["path"].endswith("models/best.pth")} >= \
        {(0, True), (1, False), (2, False)}
    watched = by_event(run, "file_watch")
    assert sorted(watched) == [0, 1, 2] and all(w["calls"] > 0 and w["seconds"] > 0 for w in watched.values())

    # the console: fastai's table from one rank, each rank's load lines, the outcome table
    assert run.out.count("train_loss") == 1
    assert run.out.count("Attempting to load model.") == 3
    assert "rank 0: Model saved." in run.out and "rank 0: Loaded model." in run.out
    assert run.out.count("Load failed: FileNotFoundError") == 2
    assert "rank  outcome" in run.out and s["explanation"] in run.out
    assert not alive(run.rank_pids())


def test_barrier_seed_scenario_is_clean_and_loads_wait_for_the_save(runs):
    run = runs["barrier"]
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


@pytest.mark.parametrize("name, peer_at", [("settled_race", "final"), ("settled_clean", "sync_enter")])
def test_a_skew_that_ends_when_settled_stalls_only_until_every_peer_is_past_its_load_or_waiting(runs, name, peer_at):
    """skew.end_when_settled: rank 0's 20 s stall ends once rank 1 has loaded (unsynced: it read too early, a race)
    or waits in the barrier (which outlasts the stall: it would only wait longer); the verdict is the whole stall's."""
    run = runs[name]
    assert run.rc == 0, run.err[-3000:]
    start, end = by_event(run, "skew_start")[0], by_event(run, "skew_end")[0]
    assert start["seconds"] == 20 and end["settled"] is True
    assert by_event(run, peer_at)[1]["t"] <= end["t"] < start["t"] + 10
    if name == "settled_race":
        assert run.outcomes() == {0: "loaded", 1: "missing"} and run.summary["verdict"] == "race"
    else:
        assert run.outcomes() == {0: "loaded", 1: "loaded"} and run.summary["verdict"] == "clean"
        assert f"it stalled {secs(end['t'] - start['t'])} s of its 20.0 s, until every other rank was past its load " \
            "or waiting for it" in run.summary["explanation"]


def test_an_older_checkpoint_is_read_as_stale_and_expect_mismatch_exits_1(runs):
    run = runs["stale"]
    assert run.rc == 1
    assert "expected clean, got race" in run.err
    assert run.outcomes() == {0: "loaded", 1: "stale"}
    assert "loaded an older checkpoint (the epoch-" in run.summary["explanation"]


def test_the_console_shows_no_stack_trace_traceback_or_torch_warning(runs):
    """A race run, a clean one, and one whose rank 0 dies (torch warns as it stops the others: it used to reach
    the console): every rank's output is echoed, torch's own lines stay in logs/launcher.log."""
    for name in ("unsynced", "barrier", "crash"):
        assert runs[name].rc == 0, runs[name].err[-3000:]
        assert not console_noise(runs[name].out, runs[name].err), name
    assert "Terminating process" in (runs["crash"].dir / "logs" / "launcher.log").read_text()


def test_a_crashed_rank_leaves_its_events_and_no_process(runs):
    run = runs["crash"]
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


def test_a_run_dir_that_holds_a_run_is_refused_before_any_rank(runs):
    first = runs["first"]
    assert first.rc == 0, first.err[-3000:]
    before = (first.dir / "summary.json").read_bytes()
    again = run_train(first.dir, "world_size=1")
    assert again.rc == 2
    assert again.err.strip().splitlines() == \
        [f"error: hydra.run.dir={first.dir}: already holds a run; give each run its own dir"]
    assert (first.dir / "summary.json").read_bytes() == before  # the first result is untouched


def test_mnist_sample_goes_through_fastais_untar_data_and_image_loaders(runs):
    """Offline: a small stand-in where untar_data keeps MNIST_SAMPLE (mnist_sample_stand_in)."""
    run = runs["mnist_sample"]
    assert run.rc == 0, run.err[-3000:]
    assert run.outcomes() == {0: "loaded", 1: "missing"}
    assert by_event(run, "fit_start")[0]["train_batches"] == 2  # 48 images in 3 batches, shared by two ranks
