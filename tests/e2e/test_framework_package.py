"""A framework that lives outside race-lab (issue 38): a team's in-house trainer, examples/inhouse_trainer/, a
package of its own that implements the contract (train/frameworks/base.py) and registers it under the entry points
`race_lab.frameworks`. Installed with pip (into a folder on PYTHONPATH, as a venv would hold it), race-lab runs it
end to end on real ranks, and a package whose entry point is broken is refused in one line before any rank."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, run_train

EXAMPLE = ROOT / "examples" / "inhouse_trainer"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> str:
    """The example package installed by pip into a folder of its own: its PYTHONPATH."""
    source, target = tmp_path_factory.mktemp("source") / EXAMPLE.name, tmp_path_factory.mktemp("site")
    shutil.copytree(EXAMPLE, source)  # pip builds in the folder it is given: not in the repository
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return str(target)


def with_path(path: str) -> dict:
    return {"PYTHONPATH": os.pathsep.join([path, *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_the_in_house_trainer_as_written_races_and_its_barrier_holds_the_seed(installed, tmp_path):
    shipped = run_train(tmp_path / "as_shipped", "framework=inhouse", "world_size=2", env=with_path(installed))
    assert shipped.rc == 0, shipped.err[-2000:]
    assert shipped.summary["verdict"] == "race" and shipped.outcomes()[1] in ("stale", "missing"), shipped.out[-1500:]
    assert shipped.summary["environment"]["framework"] == {
        "name": "inhouse",
        "distribution": "inhouse-trainer",
        "version": "0.1.0",
    }
    barrier = run_train(
        tmp_path / "barrier", "framework=inhouse", "fix=barrier", "world_size=2", env=with_path(installed)
    )
    assert barrier.rc == 0 and barrier.summary["verdict"] == "clean", barrier.out[-1500:]
    assert set(barrier.outcomes().values()) == {"loaded"}


def test_a_scenario_the_trainer_cannot_run_is_n_a_with_its_contracts_reason(installed, tmp_path):
    run = run_train(tmp_path / "resume", "framework=inhouse", "scenario=crash_mid_save", env=with_path(installed))
    assert run.rc == 2, run.out + run.err
    assert (
        "n/a: needs resume; inhouse has none: the in-house trainer keeps the best and loads it at the end; "
        "it has no resume"
    ) in run.err


@pytest.mark.slow
def test_race_lab_check_on_the_in_house_trainer_says_unsafe_and_counts_its_scenarios(installed, tmp_path):
    out = tmp_path / "check"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "train",
            "check",
            "framework=inhouse",
            "check.repeats=1",
            "check.disks=shared",
            f"hydra.sweep.dir={out}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **with_path(installed)},
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    rows = {row["name"]: row for row in json.loads((out / "check.json").read_text())["scenarios"]}
    assert set(rows) == {"seed", "stale", "torn", "save_fails"}  # load_best, no guard, one shared disk
    assert rows["seed"]["verdict"] == "raced" and all(row["counted"] == 1 for row in rows.values())


def test_an_entry_point_that_does_not_load_is_refused_in_one_line(tmp_path):
    dist_info = tmp_path / "broken_trainer-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-trainer\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text("[race_lab.frameworks]\nbroken = no_such_package.race_lab:Broken\n")
    run = run_train(tmp_path / "run", "framework=broken", env=with_path(str(tmp_path)))
    assert run.rc == 2, run.out + run.err
    assert (
        "error: framework=broken: its entry point no_such_package.race_lab:Broken does not load "
        "(ModuleNotFoundError: No module named 'no_such_package')"
    ) in run.err
    assert not (tmp_path / "run" / "events").exists()  # refused before any rank started
