"""Every run and every sweep gets a folder of its own (train/launch/folders.py), whatever starts beside it under the
same name: the default names end in the second they started, so two runs started together from one folder (parallel
CI jobs in one workspace) were given the same one, and the second was refused ("already holds a run"); two sweeps
wrote their jobs into one folder. Here the name is the same by construction, given through the same resolver the
defaults use (configs/train.yaml)."""
import json

import pytest

from conftest import RACE_LAB, side_by_side


@pytest.mark.slow
def test_runs_and_sweeps_started_together_under_one_name_each_get_a_folder_of_their_own(tmp_path):
    commands = {f"run{n}": ([RACE_LAB, "world_size=2", "fix=barrier", "hydra.run.dir=${fresh:runs/same}"],
                            tmp_path / f"run{n}") for n in (1, 2)}
    commands |= {f"sweep{n}": ([RACE_LAB, "-m", "world_size=2", "fix=barrier,unsynced",
                                "hydra.sweep.dir=${fresh:sweeps/same}"], tmp_path / f"sweep{n}") for n in (1, 2)}
    launches = side_by_side(tmp_path, commands, deadline_s=600, cwd=tmp_path)
    for launch in launches.values():
        assert launch.rc == 0, (launch.name, launch.out[-3000:])
    runs = sorted((tmp_path / "runs").iterdir())
    assert [p.name for p in runs] == ["same", "same-2"]
    assert all(json.loads((p / "summary.json").read_text())["verdict"] == "clean" for p in runs)
    sweeps = sorted((tmp_path / "sweeps").iterdir())
    assert [p.name for p in sweeps] == ["same", "same-2"]
    for sweep in sweeps:  # each sweep's two jobs in its own folder, none in the other's
        fixes = [json.loads(p.read_text())["config"]["fix"]["name"] for p in sweep.glob("*/summary.json")]
        assert sorted(fixes) == ["barrier", "unsynced"], sweep
