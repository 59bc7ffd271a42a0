"""Jobs side by side (make matrix / make sweep JOBS=N; `python -m train -m hydra/launcher=jobs`): the jobs
really overlap, the sweep's lines, report and exit code come as when they run one after another; Ctrl-C stops
every job at once and leaves nothing running (slow); and at the default JOBS the matrix's must-hold cells give
their verdict in 5 of 5 repeats (slow)."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import ROOT, processes_tagged, tagged_env
from helpers.interrupts import assert_stopped_at_once, events_below, interrupt
from helpers.matrix_expected import EXPECTED, FIXES

pytestmark = pytest.mark.slow  # sweeps whose jobs run side by side, with real ranks (make test-fast leaves them out; CI runs them)

SIDE_BY_SIDE = ["hydra/launcher=jobs", "hydra.launcher.n_jobs=2"]  # what make's JOBS=2 adds


def first(events, rank, event):
    return next(e["t"] for e in events if e["rank"] == rank and e["event"] == event)


def test_the_sweeps_process_starts_no_forkserver_when_its_jobs_run_in_workers():
    from train.launch.forkserver import forkserver_wanted

    assert forkserver_wanted(["-m", *SIDE_BY_SIDE]) is False  # each worker starts its own, on its first job


def test_two_jobs_run_at_once_and_the_sweep_reports_as_one_after_another_does(tmp_path):
    sweep = tmp_path / "sweep"
    # two good jobs, then two with a bad value: those are reported, and the sweep exits 1 at the end
    proc = subprocess.run([sys.executable, "-m", "train", "-m", f"hydra.sweep.dir={sweep}", *SIDE_BY_SIDE,
                           "launch.job_lines=true", "skew.rank=0,5", "fix=unsynced,barrier", "world_size=2", "epochs=1",
                           "skew.seconds=3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=tagged_env(str(sweep)))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert not processes_tagged(str(sweep)), "a worker, forkserver or rank outlived the sweep"
    assert f"[sweep] 4 jobs into {sweep}, 2 at a time" in proc.stdout
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("[sweep] job "))
    assert len(lines) == 4, proc.stdout[-3000:]
    point = "world_size=2 epochs=1 skew.seconds=3"
    assert f"skew.rank=0 fix=unsynced {point}  race  " in lines[0], lines
    assert f"skew.rank=0 fix=barrier {point}  clean  " in lines[1], lines
    assert "error: skew.rank=5: must be a rank in 0..1 (world_size=2)" in proc.stderr
    assert "[sweep] 2 of 4 jobs did not give a result" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr

    with open(sweep / "report.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["fix"], r["verdict"]) for r in rows) == [("barrier", "clean"), ("unsynced", "race")]
    assert "| unsynced | 2 | 3 | 1 | 1/1 (21–100%) |" in proc.stdout  # the report's table, printed at the end
    jobs = sorted(sweep.glob("[0-9]-*"))
    assert len(jobs) == 2 and all((job / "timeline.png").stat().st_size > 10_000 for job in jobs)
    # side by side: each job's launcher started before the other's ended
    (a, b) = [events_below(job) for job in jobs]
    assert first(a, "launcher", "launch_start") < first(b, "launcher", "launch_end")
    assert first(b, "launcher", "launch_start") < first(a, "launcher", "launch_end")


@pytest.mark.slow  # Ctrl-C of one run and the launcher alone are in test_interrupt.py's fast tests
def test_ctrl_c_stops_every_job_side_by_side_at_once_and_runs_none_of_the_queued(tmp_path):
    sweep = tmp_path / "sweep"

    def both_fitting(events):  # rank 0 of both running jobs has started fitting
        return len({e["file"] for e in events if e["rank"] == 0 and e["event"] == "fit_start"}) == 2
    rc, took, sent, out = interrupt(sweep, ["-m", f"hydra.sweep.dir={sweep}", *SIDE_BY_SIDE, "world_size=2",
                                            "skew.seconds=3", "fix=unsynced,barrier,poll"], after=1,
                                    when=both_fitting)
    assert_stopped_at_once(sweep, rc, took, sent, out)  # exit 130, every rank stopped, nothing left running
    summaries = sorted(sweep.glob("*/summary.json"))
    assert len(summaries) == 2  # the two that ran; the third, queued, never started
    assert {json.loads(s.read_text())["verdict"] for s in summaries} == {"interrupted"}
    assert f"[sweep] stopped by SIGINT; the jobs that ran are in {sweep}" in out



def test_a_worker_whose_job_is_over_holds_the_ctrl_c_and_the_pool_stays_whole(tmp_path):
    """The sweep passes a Ctrl-C on to each job's worker, the one whose job is over too: in loky's idle loop it
    raised KeyboardInterrupt, the worker died, the pool broke and the sweep ended, killing the running job before
    its summary (CI: a check's runs left without one). The worker holds the signal; the sweep runs on, and a
    Ctrl-C then stops it as one does, each job's summary written."""
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "train", "-m", f"hydra.sweep.dir={sweep}", *SIDE_BY_SIDE,
                             "world_size=2", "fix=unsynced", "skew.seconds=0,120"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=tagged_env(str(sweep)))
    try:
        stalling = []
        while not stalling or len(list(sweep.glob("*/summary.json"))) < 1:  # one job over, the other's rank 0 stalls
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            stalling = [e["pid"] for e in events_below(sweep) if e["rank"] == 0 and e["event"] == "rank_start"
                        and "skew120" in str(e["file"])]
            time.sleep(0.1)
        running = {p.pid for p in psutil.Process(stalling[0]).parents()}
        idle = [w for w in psutil.Process(proc.pid).children() if os.getsid(w.pid) == w.pid and w.pid not in running]
        assert len(idle) == 1, idle
        idle[0].send_signal(signal.SIGINT)
        time.sleep(2)
        assert proc.poll() is None, proc.communicate()[0][-3000:]  # the pool is whole, the sweep goes on
        os.killpg(proc.pid, signal.SIGINT)
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and "Traceback" not in out, out[-3000:]
    assert not processes_tagged(str(sweep))
    runs = sorted(events.parent for events in sweep.glob("*/events"))  # the quick job's first
    assert len(runs) == 2 and all((run / "summary.json").exists() for run in runs), runs
    verdicts = [json.loads((run / "summary.json").read_text())["verdict"] for run in runs]
    assert verdicts[0] != "interrupted" and verdicts[1] == "interrupted", verdicts

# The must-hold cells run 5 times each at the default JOBS: a representative subset of the matrix (the whole,
# 61 cells x 5, takes about 15 minutes on 2 cores). It holds every verdict and every kind of margin: a late
# save (seed, stale), a stall halfway through a write (torn), and a hang that waits out its timeout while
# the other job runs (disagree), against no fix, the barrier, atomic and agreed.
MUST_HOLD = {"scenarios": ["seed", "stale", "torn", "disagree"], "fixes": ["unsynced", "barrier", "atomic", "agreed"]}
REPEATS = 5


@pytest.mark.slow
def test_the_must_hold_cells_give_their_verdict_5_of_5_at_the_default_jobs(tmp_path):
    sweep = tmp_path / "matrix"
    proc = subprocess.run(["make", "-s", "matrix", f"DIR={sweep}", f"REPEATS={REPEATS}",
                           f"SCENARIOS={','.join(MUST_HOLD['scenarios'])}", f"FIXES={','.join(MUST_HOLD['fixes'])}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200, env=tagged_env(str(sweep)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not processes_tagged(str(sweep))
    with open(sweep / "matrix.csv", newline="") as f:
        cells = {(r["scenario"], r["fix"]): r for r in csv.DictReader(f)}
    held = {}
    for scenario in MUST_HOLD["scenarios"]:
        for fix in MUST_HOLD["fixes"]:
            verdict, outcome = EXPECTED[scenario][FIXES.index(fix)]
            cell = cells[(scenario, fix)]
            held[(scenario, fix)] = (cell["verdict"], cell["verdict_runs"], cell["counted"], cell["runs"])
            assert verdict != "clean" or cell["outcome"] == "loaded"
            assert verdict == "clean" or cell["outcome"] == outcome, f"{scenario} x {fix}: {cell}"
    n = str(REPEATS)
    wanted = {(s, f): (EXPECTED[s][FIXES.index(f)][0], n, n, n) for (s, f) in held}
    assert held == wanted  # every cell: its verdict in every repeat, every run counted
