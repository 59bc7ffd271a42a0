"""Defaults that run (issue 29): a framework alone runs as shipped, a resume scenario alone runs a framework that
resumes, and a pair that makes no sense names a command that runs."""
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import ROOT, tagged_env
from train.launch.defaults import a_command_that_runs, with_defaults_filled


@pytest.mark.parametrize("given, added", [
    (["framework=lightning"], ["fix=as_shipped"]),
    (["framework=fastai", "scenario=torn"], ["fix=barrier"]),
    (["scenario=crash_mid_save"], ["framework=torch_loop", "fix=in_place"]),
    (["scenario=crash_mid_save", "framework=lightning"], ["fix=as_shipped"]),
    (["framework=lightning", "fix=broadcast"], []),  # a fix given is kept
    (["callback=x", "scenario=seed"], []),  # nothing to fill
    (["-m", "framework=lightning,transformers"], []),  # a sweep over frameworks keeps its fixes
    (["scenario=seed,crash_mid_save"], []),
])
def test_what_a_command_line_leaves_out_is_filled_in(given, added):
    assert with_defaults_filled(given) == given + added


def test_a_filled_in_key_joins_the_overrides_before_an_option_and_hydra_takes_it():
    given = ["framework=deepspeed", "--cfg", "job"]
    assert with_defaults_filled(given) == ["framework=deepspeed", "fix=as_shipped", "--cfg", "job"]
    done = subprocess.run([sys.executable, "-m", "train", *given], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]  # was: "unrecognized arguments: fix=as_shipped"
    assert "name: as_shipped" in done.stdout and "name: deepspeed" in done.stdout


def test_a_pair_that_makes_no_sense_names_a_command_that_runs():
    assert a_command_that_runs("seed", "lightning") == "race-lab scenario=seed framework=lightning fix=as_shipped"
    assert a_command_that_runs("crash_mid_save", "fastai") == \
        "race-lab scenario=crash_mid_save framework=torch_loop fix=in_place"
    # the Trainer keeps no pointer: a resume scenario goes to the framework that only resumes
    assert a_command_that_runs("pointer_first", "transformers") == \
        "race-lab scenario=pointer_first framework=torch_loop fix=in_place"


@pytest.mark.slow
def test_the_obvious_first_commands_reach_a_verdict(tmp_path):
    """`race-lab framework=lightning`, `framework=transformers` and `scenario=crash_mid_save`, side by side."""
    commands = {"lightning": ["framework=lightning"], "transformers": ["framework=transformers"],
                "resume": ["scenario=crash_mid_save"]}

    def run(name):
        run_dir = tmp_path / name
        done = subprocess.run([sys.executable, "-m", "train", "world_size=2", *commands[name],
                               f"hydra.run.dir={run_dir}"], check=False, cwd=ROOT, capture_output=True, text=True,
                              timeout=600,
                              env=tagged_env(str(run_dir)))
        return done, json.loads((run_dir / "summary.json").read_text())

    with ThreadPoolExecutor(len(commands)) as pool:
        results = dict(zip(commands, pool.map(run, commands)))
    for name, (done, summary) in results.items():
        assert done.returncode == 0, (name, done.stderr[-2000:])
        assert summary["verdict"] in ("clean", "race", "save_failed"), (name, summary["verdict"])
    assert results["lightning"][1]["config"]["fix"]["name"] == "as_shipped"
    assert results["resume"][1]["config"]["framework"]["name"] == "torch_loop"
    assert results["resume"][1]["verdict"] == "race"  # the naive loop resumes from the torn file
