"""The GitHub Actions workflow in docs/check.md ("As a gate in your own CI"), run as its job would run it: the file
is a valid workflow (check-jsonschema's GitHub workflow schema, offline), and its `run:` steps run, verbatim, in a
scratch workspace laid out as the job's checkout: the team's repository (a package with its own class) with
race-lab checked out in race-lab/. Standing in for the steps that need GitHub: race-lab/ is this repository (a
link), and its .venv the one restored from the cache, so `make -C race-lab install` finds it up to date as on a
cache hit. The gate step gets check.repeats=1 check.restarts=false after it, to stay within a test's time."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, processes_tagged, tagged_env
from helpers.markdown import PYTHON_BLOCK, YAML_BLOCK

SHORTER = "check.repeats=1 check.restarts=false"  # appended to the gate's step: 7 scenarios, one run each


def workflow() -> tuple:
    """docs/check.md's workflow: (its text, parsed)."""
    text = (ROOT / "docs" / "check.md").read_text().split("## As a gate in your own CI", 1)[1]
    [block] = YAML_BLOCK.findall(text.split("\n## ", 1)[0])
    return block, yaml.safe_load(block)


def test_the_ci_example_is_a_valid_github_workflow(tmp_path):
    block, _ = workflow()
    (tmp_path / "race-lab.yml").write_text(block)
    done = subprocess.run([str(Path(sys.executable).parent / "check-jsonschema"), "--builtin-schema",
                           "vendor.github-workflows", str(tmp_path / "race-lab.yml")], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_the_ci_examples_steps_install_race_lab_and_gate_on_the_check(tmp_path):
    _, parsed = workflow()
    [job] = parsed["jobs"].values()
    runs = [step["run"] for step in job["steps"] if "run" in step]
    assert [r.split()[0] for r in runs] == ["make", "race-lab/.venv/bin/race-lab"], runs  # install, then the gate
    uploads = [step["with"]["path"] for step in job["steps"] if step.get("uses", "").startswith("actions/upload")]
    workspace = tmp_path / "workspace"
    package = workspace / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    [code] = PYTHON_BLOCK.findall((ROOT / "docs" / "fixes" / "lightning.md").read_text())
    (package / "checkpoints.py").write_text(  # the team's class: docs/fixes/lightning.md's file, as copied
        code + "\n\nclass MyCheckpointIO(Rank0LeadsCheckpointIO):\n    pass\n")
    (workspace / "race-lab").symlink_to(ROOT)
    env = {k: v for k, v in tagged_env(str(workspace)).items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    install = subprocess.run(["bash", "-e", "-c", runs[0]], cwd=workspace, env=env, capture_output=True, text=True,
                             timeout=600, check=False)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    gate = subprocess.run(["bash", "-e", "-c", f"{runs[1]} {SHORTER}"], cwd=workspace, env=env, capture_output=True,
                          text=True, timeout=1200, check=False)
    assert gate.returncode == 0, gate.stdout[-3000:] + gate.stderr[-3000:]  # safe: the job passes
    assert not processes_tagged(str(workspace))
    assert any(line.startswith("safe") for line in gate.stdout.splitlines()), gate.stdout[-3000:]  # the card's answer
    [artifact] = uploads
    [folder] = (workspace / artifact).iterdir()  # what the upload step finds: the check's folder
    checked = json.loads((folder / "check.json").read_text())
    assert (checked["verdict"], checked["class"]) == ("safe", "mypkg.checkpoints.MyCheckpointIO")
