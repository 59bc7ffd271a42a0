import itertools
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

pytest_plugins = ["pytester"]  # a user's project run by pytest (tests/e2e/test_pytest_plugin.py)

ROOT = Path(__file__).resolve().parent.parent
# the race-lab command (pyproject.toml's script) beside this python, as a user's shell finds it
RACE_LAB = str(Path(sys.executable).parent / "race-lab")
# classes of the tests' own that runs take as fix=own, with this folder on PYTHONPATH
OWN_CLASSES = ROOT / "tests" / "own_classes"


class Run:
    def __init__(self, proc, run_dir: Path):
        self.proc, self.dir = proc, run_dir
        self.rc, self.out, self.err = proc.returncode, proc.stdout, proc.stderr

    @property
    def summary(self) -> dict:
        return json.loads((self.dir / "summary.json").read_text())

    @property
    def events(self) -> list:
        from train.events import read_events
        return read_events(self.dir)

    def outcomes(self) -> dict:
        return {r["rank"]: r["outcome"] for r in self.summary["ranks"]}

    def rank_pids(self) -> list:
        return [e["pid"] for e in self.events if e["event"] == "rank_start"]


def run_train(run_dir: Path, *overrides, timeout=300, env=None) -> Run:
    """python -m train as a user runs it, into run_dir; fails the test instead of hanging.
    Its processes are tagged with the run dir (see processes_tagged)."""
    proc = subprocess.run([sys.executable, "-m", "train", f"hydra.run.dir={run_dir}", *overrides],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**tagged_env(str(run_dir)), **(env or {})})
    return Run(proc, run_dir)


def multirun(sweep_dir, *overrides, timeout=600):
    """python -m train -m (a Hydra sweep) into sweep_dir."""
    return subprocess.run([sys.executable, "-m", "train", "-m", f"hydra.sweep.dir={sweep_dir}", *overrides],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def alive(pids) -> list:
    """The pids still running (zombies count as gone)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def tagged_env(tag: str) -> dict:
    """The environment for a launcher whose every descendant can be found again by `tag`."""
    return {**os.environ, "RACE_LAB_TEST_TAG": tag}


def processes_tagged(tag: str) -> list:
    """Processes still running that inherited RACE_LAB_TEST_TAG=tag (launcher, forkserver, ranks)."""
    found = []
    for p in psutil.process_iter(["status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and p.environ().get("RACE_LAB_TEST_TAG") == tag:
                found.append((p.pid, " ".join(p.cmdline())))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


@pytest.fixture
def train(tmp_path):
    """train(*overrides): one run of python -m train, each call into a new run dir."""
    dirs = (tmp_path / f"run{i}" for i in itertools.count())
    return lambda *overrides, **kw: run_train(next(dirs), *overrides, **kw)


# --- several launches side by side: the real-rank cell tests start their multiruns together --------------

@dataclass
class Launch:
    """One command of a side-by-side start, once it ended (or was stopped at its deadline)."""
    name: str
    dir: Path  # its run or sweep dir, which tags its processes
    rc: int
    out: str  # what it printed (stdout and stderr)
    hung: bool  # stopped at the deadline
    deadline_s: float

    def ended(self):
        assert not self.hung, f"{self.name}: did not end within {self.deadline_s} s; stopped. Output:\n{self.out[-3000:]}"
        assert not processes_tagged(str(self.dir)), f"{self.name}: left processes running"

    def jobs(self) -> list:
        """(summary.json, its job dir) of each job of a sweep, once the launch ended and left no process."""
        self.ended()
        return [(json.loads(p.read_text()), p.parent) for p in sorted(self.dir.glob("*/summary.json"))]

    def not_run(self) -> list:
        """The jobs the sweep left out as n/a, each as its summary.json would have been (not_run.json)."""
        from train.report.run_records import read_not_run

        self.ended()
        return read_not_run(self.dir)

    def summaries(self) -> dict:
        """(scenario, fix) -> summary.json of each job, and the record of each job left out as n/a."""
        return {(s["config"]["scenario"], s["config"]["fix"]["name"]): s
                for s in [s for s, _ in self.jobs()] + self.not_run()}

    def cell(self, fix: str) -> dict:
        """The summary.json of the job with fix=fix (a sweep over fixes of one scenario), or its n/a record."""
        found = [s for s in [s for s, _ in self.jobs()] + self.not_run() if s["config"]["fix"]["name"] == fix]
        assert found, f"{self.name}: no job with fix={fix}:\n{self.out[-3000:]}"
        return found[0]


def sweep_command(sweep_dir: Path, *overrides) -> tuple:
    """(argv, dir) of `python -m train -m ...` into sweep_dir, for side_by_side."""
    return [sys.executable, "-m", "train", "-m", *overrides, f"hydra.sweep.dir={sweep_dir}"], sweep_dir


def sweep_groups(root: Path, groups: dict, *common, deadline_s: float, env=None) -> dict:
    """Each group (name -> its overrides) a `python -m train -m` sweep into root/<name>, after the common
    overrides; every group started together and waited for (side_by_side). name -> Launch."""
    return side_by_side(root, {name: sweep_command(root / name, *common, *argv) for name, argv in groups.items()},
                        deadline_s, env=env)


def side_by_side(root: Path, commands: dict, deadline_s: float, cwd=ROOT, env=None) -> dict:
    """Start every command (name -> (argv, dir)) at once in cwd, each tagged with its dir (env: more variables),
    wait for all within deadline_s together (one still running then is killed: its forkserver and ranks go
    with it), and return name -> Launch. Their output is in root/<name>.log too."""
    started = {}
    for name, (argv, run_dir) in commands.items():
        log = open(root / f"{name}.log", "w")
        started[name] = (subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                          env={**tagged_env(str(run_dir)), **(env or {})}), run_dir, log)
    deadline = time.monotonic() + deadline_s
    out = {}
    for name, (proc, run_dir, log) in started.items():
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            hung = False
        except subprocess.TimeoutExpired:
            proc.kill()  # PR_SET_PDEATHSIG takes its forkserver and ranks along
            proc.wait()
            hung = True
        log.close()
        out[name] = Launch(name, run_dir, proc.returncode, (root / f"{name}.log").read_text(), hung, deadline_s)
    return out


def together(root: Path, commands: dict, deadline_s: float, cwd=ROOT) -> dict:
    """Start every command (name -> (argv, its dir, more environment or None)) at once in cwd, each tagged with
    its dir, and wait for all within deadline_s together (one still running then is killed, and its forkserver
    and ranks with it: returncode -9). name -> a CompletedProcess (returncode, stdout, stderr apart, as
    subprocess.run gives them; also in root/<name>.out and .err), for tests written against run_train or
    multirun whose runs can share the machine's stalls."""
    started = {}
    for name, (argv, run_dir, env) in commands.items():
        out, err = open(root / f"{name}.out", "w"), open(root / f"{name}.err", "w")
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=err,
                                env={**tagged_env(str(run_dir)), **(env or {})})
        started[name] = (proc, out, err)
    deadline = time.monotonic() + deadline_s
    done = {}
    for name, (proc, out, err) in started.items():
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()  # PR_SET_PDEATHSIG takes its forkserver and ranks along
            proc.wait()
        out.close()
        err.close()
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, (root / f"{name}.out").read_text(),
                                                 (root / f"{name}.err").read_text())
    return done


# what the console never shows in a run or sweep that ends with a verdict (train/launch/quiet.py): a C++ source
# location (torch's stack traces), a Python traceback, a warning torch logs (W1201 21:34:48.25 ... spawn.py:165])
CONSOLE_NOISE = re.compile(r"\w+\.(cpp|cc|h|hpp):\d+|Traceback \(most recent call last\)|^\[?W\d{4} \d\d:\d\d:\d\d",
                           re.MULTILINE)


def console_noise(*texts) -> list:
    """The lines of these console outputs that CONSOLE_NOISE matches."""
    return [line for text in texts for line in text.splitlines() if CONSOLE_NOISE.search(line)]


def train_command(run_dir: Path, *overrides) -> list:
    """The argv of run_train's python -m train."""
    return [sys.executable, "-m", "train", f"hydra.run.dir={run_dir}", *overrides]


def multirun_command(sweep_dir: Path, *overrides) -> list:
    """The argv of multirun's python -m train -m."""
    return [sys.executable, "-m", "train", "-m", f"hydra.sweep.dir={sweep_dir}", *overrides]


# --- the order files start in: the longest first ------------------------------------------------------------
# make test and make test-fast run each file whole on one of two xdist workers (--dist loadfile), handed out in
# collection order; a long file handed out last runs alone at the end (test_matrix.py did, about 6 min, in .ci/run
# on 2026-12-02). These start first, longest first as measured then (make test's, then make test-fast's); every
# other file keeps its order after them.
LONGEST_FIRST = ["test_matrix.py", "test_engine.py", "test_jobs.py", "test_cells.py", "test_race.py",
                 "test_deepspeed.py", "test_torch_loop_resume.py", "test_own_class.py", "test_refusals.py", "test_check.py",
                 "test_fix_support.py"]


def pytest_collection_modifyitems(items):
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: a file's own order kept
