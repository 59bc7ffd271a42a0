import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent


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
