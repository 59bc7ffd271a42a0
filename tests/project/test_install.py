"""make install: the interpreter check (with real interpreters), a failed build that leaves no .venv (real
venv, real pip), and the race-lab command run from a folder outside the repo (a real run)."""
import json
import os
import re
import subprocess
import sys
import sysconfig
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from conftest import ROOT, tagged_env

CHECK = ROOT / "tools" / "check-python.sh"
DEBIAN_PYTHON = Path("/usr/bin/python3.11")  # Debian bookworm's is 3.11.2: below the range
GOOD_PYTHON = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"


def supported_range():
    text = CHECK.read_text()
    return re.search(r"^MIN=(\S+)$", text, re.M)[1], re.search(r"^BELOW=(\S+)$", text, re.M)[1]


def not_here(reason: str):
    """Skip on a laptop that lacks what the test needs; under CI=true fail, since .ci/run provides it."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but this test cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def python_version(python: Path) -> str:
    return subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, check=True).stdout.strip()


def out_of_range_python() -> Path:
    """Debian's python3.11 where it is below the range, else the test is skipped."""
    if not DEBIAN_PYTHON.exists():
        not_here(f"{DEBIAN_PYTHON} is absent: no Python below the range to try here (.ci/run installs it)")
    low = tuple(int(n) for n in supported_range()[0].split("."))
    if tuple(int(n) for n in python_version(DEBIAN_PYTHON).split(".")) >= low:
        not_here(f"{DEBIAN_PYTHON} is {python_version(DEBIAN_PYTHON)}, inside the range")
    return DEBIAN_PYTHON


def make_install(venv: Path, python, **env) -> subprocess.CompletedProcess:
    """make install into venv (never the repo's .venv)."""
    return subprocess.run(["make", "--no-print-directory", "install", f"VENV={venv}", f"PYTHON={python}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, **env})


def test_pyproject_and_check_python_agree_on_the_range():
    low, below = supported_range()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={low},<{below}"


def test_check_python_refuses_a_python_below_the_range_in_one_line():
    python = out_of_range_python()
    proc = subprocess.run(["bash", CHECK, python], capture_output=True, text=True, timeout=60)
    low, below = supported_range()
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"error: make install needs CPython >={low},<{below} on Linux x86_64, the range "
                           f"requirements.lock installs on; found: {python} is {python_version(python)}; "
                           "install one and pass it: make install PYTHON=/path/to/python3.12\n")


def test_check_python_takes_the_first_that_fits():
    proc = subprocess.run(["bash", CHECK, "race-lab-no-such-python", GOOD_PYTHON], capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert Path(proc.stdout.strip()).resolve() == GOOD_PYTHON.resolve()


def test_make_install_with_a_python_below_the_range_builds_nothing(tmp_path):
    python = out_of_range_python()
    proc = make_install(tmp_path / "venv", python)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"found: {python} is " in errors[0], proc.stderr
    assert not (tmp_path / "venv").exists()


@pytest.mark.slow  # real venv and pip: about 10 s on 2 busy cores
def test_a_build_that_fails_leaves_no_venv(tmp_path):
    venv = tmp_path / "venv"
    proc = make_install(venv, GOOD_PYTHON, PIP_NO_INDEX="1")  # real pip, which then finds none of the lock
    assert proc.returncode != 0
    assert "No matching distribution found" in proc.stderr, proc.stderr[-2000:]
    assert f"make install failed: removed the unfinished {venv}" in proc.stderr
    assert not venv.exists()


@pytest.mark.slow  # real venv and pip: about 10 s on 2 busy cores
def test_a_venv_left_by_a_python_below_the_range_is_replaced(tmp_path):
    """What an older make install left after failing with Debian's python3.11: the next one starts over."""
    python, venv = out_of_range_python(), tmp_path / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    proc = make_install(venv, GOOD_PYTHON, PIP_NO_INDEX="1")  # then fails at the lock, as above, and cleans up
    assert (f"replacing {venv} (its Python is {python_version(python)}) with a new one from "
            f"{GOOD_PYTHON}") in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode != 0 and not venv.exists()


def test_the_race_lab_command_runs_from_another_folder(tmp_path):
    script = Path(sys.executable).parent / "race-lab"
    if not script.exists():
        not_here(f"{script} is missing: make install installs the race-lab command")
    # the venv's record of the install, not the race_lab.egg-info that the build leaves in the repo
    dist = next(metadata.distributions(name="race-lab", path=[sysconfig.get_paths()["purelib"]]), None)
    origin = dist and json.loads(dist.read_text("direct_url.json") or "{}").get("url")
    if origin != ROOT.as_uri():
        not_here(f"race-lab in this venv is installed from {origin}, not from this checkout ({ROOT})")
    assert not tmp_path.is_relative_to(ROOT)
    proc = subprocess.run([script, "scenario=seed", "world_size=2", "epochs=1"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=tagged_env(str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = list((tmp_path / "runs").rglob("summary.json"))  # Hydra's run dir: runs/... under the cwd
    assert len(summaries) == 1, list(tmp_path.rglob("*"))[:20]
    assert json.loads(summaries[0].read_text())["verdict"] == "race"
