"""What `make bench` relies on, checked without timing anything: speed goals live in the benchmark."""
import pytest

from train.bench.measure import FRAMEWORK_MODULES, launcher_imports
from train.launch.forkserver import adapters_named, forkserver_wanted, preload_list


def test_the_launcher_imports_no_framework():
    assert launcher_imports(FRAMEWORK_MODULES) is False
    assert launcher_imports(("torch",)) is True  # the check sees what the launcher does import


@pytest.mark.parametrize("argv, preloaded", [
    ([], ["train.rank.preload", "train.frameworks.fastai.load_best"]),
    (["framework=lightning"], ["train.rank.preload", "train.frameworks.lightning.lightning_package"]),
    (["-m", "framework=transformers,deepspeed"], ["train.rank.preload", "train.frameworks.transformers.load_best",
                                                  "train.frameworks.transformers.resume",
                                                  "train.frameworks.deepspeed.accelerator",
                                                  "train.frameworks.deepspeed.resume"]),
    (["framework=nope"], ["train.rank.preload"]),  # the config's error to report, later
])
def test_the_forkserver_preloads_only_the_frameworks_the_command_line_names(argv, preloaded):
    assert preload_list(adapters_named(argv)) == preloaded


@pytest.mark.parametrize("argv, wanted", [
    ([], True),
    (["-m", "skew.seconds=3", "repeat=range(10)"], True),
    (["launch.start_method=forkserver"], True),
    (["launch.start_method=spawn"], False),
    (["-m", "launch.start_method=spawn,forkserver"], False),
    (["scenario=no_shared_fs"], True),  # every node's agent on this host forks from it
    (["scenario=torn"], True),
    (["launch.all_nodes_here=true", "nnodes=2"], True),
    (["-m", "hydra/launcher=slurm"], False),
    (["--cfg", "job"], False),
    (["--help"], False),
])
def test_the_forkserver_starts_early_only_when_the_command_line_allows(argv, wanted):
    assert forkserver_wanted(argv) is wanted


def test_every_framework_of_the_bench_has_its_plain_script_and_a_goal():
    from train.bench.cli import FRAMEWORKS, GOALS
    from train.bench.measure import ROOT

    assert "deepspeed" in FRAMEWORKS
    for name in FRAMEWORKS:
        assert (ROOT / "bench" / f"plain_{name}.py").is_file()
        assert f"{name}_single_vs_plain_ratio" in GOALS


def test_a_framework_whose_single_run_failed_gets_no_ratio(tmp_path, monkeypatch):
    """A failed run is fast: its wall is no figure (the single run of framework=deepspeed on the default, n/a,
    scenario ended in 6 s with no verdict and read as a ratio of 0.34, met)."""
    import subprocess

    from train.bench import measure

    monkeypatch.setattr(measure, "single_run", lambda run_dir, skew, extra: {"wall_s": 5.0, "verdict": None,
                                                                             "extra": extra})
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    runs = measure.framework_runs(tmp_path, "deepspeed", 2)
    assert runs["failed"] is True and runs["ratio"] is None
    assert "scenario=crash_mid_save" in runs["single_runs"][0]["extra"]  # seed is n/a for DeepSpeed


def test_a_ray_cells_phases_come_from_its_events_and_a_cell_that_never_restarted_has_none(tmp_path):
    import json

    from train.bench.measure import ray_phases

    def run(*events):
        folder = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        (folder / "events").mkdir(parents=True)
        (folder / "events" / "rank0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        return folder

    def ev(t, event, rank=0, **fields):
        return {"t": t, "rank": rank, "event": event, **fields}

    start, end = ev(100.0, "launch_start", "launcher"), ev(130.0, "launch_end", "launcher")
    killed = [ev(110.0, "rank_start", attempt=0), ev(112.0, "crash", attempt=0), ev(120.5, "rank_start", attempt=1),
              ev(121.0, "rank_start", 1, attempt=1), ev(125.0, "rank_end", attempt=1)]
    assert ray_phases(run(start, *killed, end)) == {"start_s": 10.0, "restart_s": 8.5, "end_s": 5.0}
    assert ray_phases(run(start, *killed[:2], end)) is None
