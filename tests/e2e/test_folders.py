"""Every run, sweep and check gets a folder of its own (train/launch/folders.py), whatever starts beside it under the
same name: the default names end in the second they started, so two runs started together from one folder (parallel
CI jobs in one workspace) were given the same one, and the second was refused ("already holds a run"); two sweeps
wrote their jobs into one folder. Here the name is the same by construction, given through the same resolver the
defaults use (configs/train.yaml)."""
import json
import sys
import textwrap
import time

import pytest

from conftest import RACE_LAB, processes_tagged, side_by_side


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


# race-lab check with its clock stopped: every strftime without a time of its own gives the same second, so the
# default folder's name, runs/check/<second>-<framework>-<fix>, is the same for two checks by construction (two
# checks started together share the second most of the time, not always); what is under test runs as it is
FROZEN_CLOCK = textwrap.dedent("""
    import time

    from train.__main__ import cli

    real = time.strftime
    time.strftime = lambda format, *at: real(format, *(at or (time.localtime(0),)))
    cli()
""")
SAME_SECOND = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(0))  # the name both checks get


@pytest.mark.slow
def test_two_checks_started_together_in_one_folder_each_get_a_folder_and_a_check_json_of_their_own(tmp_path):
    """Parallel CI jobs in one workspace: two `race-lab check` at once from one folder, named for the same second.
    Each writes into a folder of its own (the second -2), its own run and check.json in it, and both give the same
    answer. One scenario a check (framework=lightning check.saves=async: async_top_k, once)."""
    check = [sys.executable, "-c", FROZEN_CLOCK, "check", "framework=lightning", "check.saves=async",
             "check.repeats=1"]
    launches = side_by_side(tmp_path, {f"check{n}": (check, tmp_path / f"check{n}") for n in (1, 2)},
                            deadline_s=600, cwd=tmp_path)
    base = tmp_path / "runs" / "check" / f"{SAME_SECOND}-lightning-as_shipped"
    folders = sorted((tmp_path / "runs" / "check").iterdir())
    assert folders == [base, base.with_name(f"{base.name}-2")], [launch.out[-2000:] for launch in launches.values()]
    said = {}
    for launch in launches.values():
        assert launch.rc == 1, (launch.name, launch.out[-3000:])  # unsafe: async_top_k races (5/5 as measured)
        [into] = [line for line in launch.out.splitlines() if line.startswith("race-lab check: 1 scenario(s)")]
        said[launch.name] = into.rsplit(" into ", 1)[1]
        assert not processes_tagged(str(launch.dir))
    assert sorted(said.values()) == [str(f) for f in folders]  # each check in the folder it said, none in both
    answers = []
    for folder in folders:
        checked = json.loads((folder / "check.json").read_text())
        answers.append((checked["verdict"], checked["recommended"],
                        [(r["name"], r["verdict"], r["counted"], r["races"]) for r in checked["scenarios"]]))
        [run] = folder.glob("*/summary.json")  # its one run, and no run of the other check
        assert json.loads(run.read_text())["config"]["scenario"] == "async_top_k"
        assert (folder / "check.log").read_text().startswith(f"[sweep] 1 jobs into {folder}, ")
    assert answers[0] == answers[1] == ("unsafe", "on_durable", [("async_top_k", "raced", 1, 1)])
