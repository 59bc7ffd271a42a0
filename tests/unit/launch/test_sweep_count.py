"""A sweep's job count (train/launch/sweep.py count_jobs), as its first line says it: globs over a config group's
options are expanded as Hydra's sweeper expands them (before, `scenario=glob(*)` raised "ConfigLoader is not set"
in the sweep's callback, and the sweep printed no job line)."""
from hydra import initialize_config_dir

from conftest import ROOT
from train.launch.sweep import count_jobs


def test_a_glob_over_scenarios_counts_every_scenario_it_names_times_the_other_axes():
    named = sorted(p.stem for p in (ROOT / "configs" / "scenario").glob("s*.yaml"))
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        assert count_jobs(["scenario=glob(s*)", "fix=unsynced,barrier", "world_size=2"]) == 2 * len(named)
        assert count_jobs(["scenario=glob(*,exclude=s*)", "fix=unsynced"]) == \
            len(list((ROOT / "configs" / "scenario").glob("*.yaml"))) - len(named)
