"""Hydra callback for sweeps (-m): the jobs' progress (train/launch/progress.py: a bar on a terminal, a line every
tenth of the jobs in a log or CI), or with launch.job_lines=true one line per job as it ends (the point, the verdict,
its seconds: race-lab check's sweep writes these to check.log and reads them). Each job's timeline.png is drawn by a
low-priority thread while the next job runs.
After the last job it writes the sweep report and prints its table. Exits 1 at
the end when a job had a bad config, crashed, or missed its `expect`; a job whose verdict is race
is a result.

Each rank's full output stays in its run dir (logs/, and the launcher's table in console.log);
launch.echo_ranks=true prints it on the console too, as a single run does.

Jobs side by side (hydra/launcher=jobs: hydra-joblib-launcher, each job in a loky worker process):
the job hooks then run in the worker, on a copy of this callback. The worker writes what it knows of its
job to <sweep dir>/.jobs/<num>.json; a thread of the sweep's own process reads those files as they
come and prints the lines, draws the timelines and, after the last job, the report, as above.
On a Ray cluster (hydra/launcher=ray, train/launch/ray_jobs.py) the same, the file written by the driver once the
job's records are back.
"""
import json
import logging
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback

from train.launch.held_signal import hold_signal
from train.launch.progress import JobsProgress

HYDRA_LAUNCHER_LOGS = ("hydra._internal.core_plugins.basic_launcher",  # "Launching N jobs", "#k : point"
                       "hydra_plugins.hydra_joblib_launcher._core")  # the same, side by side
JOBS_DIR = ".jobs"  # in the sweep dir: one <num>.json per ended job, when jobs run side by side


def count_jobs(task_overrides) -> int:
    """How many jobs Hydra's basic sweeper makes of these command-line overrides. A glob (`scenario=glob(*)`) is
    expanded over the config groups' options, which takes the running Hydra's config loader, as the sweeper's does."""
    overrides = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader()).parse_overrides(
        list(task_overrides))
    return sum(len(batch) for batch in BasicSweeper.split_arguments(overrides, None))


JOB_LINE = "[sweep] job "


def job_line(k: int, total: int, point: str, verdict: str, seconds: float) -> str:
    return f"{JOB_LINE}{k} of {total}: {point}  {verdict}  {seconds:.1f} s"


def verdict_of_job_line(line: str):
    """The verdict a job_line gives ('race', 'clean (bad config)', 'crashed'), or None for any other line."""
    if not line.startswith(JOB_LINE):
        return None
    parts = line.rstrip("\n").split("  ")
    return parts[-2] if len(parts) >= 3 and parts[-1].endswith(" s") else None


DRAWING_NICE = 10  # the drawing thread's nice: the ranks get >90% of a core it shares with them; 19 (1.5%) let one
# drawing take minutes on a loaded machine, and the sweep's end waits for the one in flight


def draw_at_low_priority():
    """The drawing thread yields the cores to the ranks (Linux sets a priority per thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), DRAWING_NICE)
    except (AttributeError, OSError):
        pass


def draw_once_launched(run_dir: Path, sweep_over: threading.Event) -> bool:
    """A job's timeline, drawn once the next job has launched (its ranks then train and stall while
    the launcher waits), so that it does not slow the launcher between jobs; or at the sweep's end."""
    from train.launch.preflight import started
    from train.report.timeline import draw_timeline

    while not (started() or sweep_over.is_set()):
        time.sleep(0.05)
    return draw_timeline(run_dir)


def draw_timeline_now(run_dir: Path) -> bool:
    from train.report.timeline import draw_timeline

    return draw_timeline(run_dir)


def stop_workers(kill: bool = False):
    """End joblib's worker processes now (loky keeps them 300 s for a next call): nothing of a sweep
    may outlive it. kill: at once, not after their interpreter's teardown (an interrupt: their jobs
    have ended and written their records). Without joblib (no side-by-side jobs ran), nothing to do."""
    if "joblib" not in sys.modules:
        return
    from joblib.externals.loky import reusable_executor

    workers = reusable_executor._executor  # loky's one pool (its public getter would make one; were the name
    if workers is not None:  # gone, the workers would end on their own 300 s after the sweep)
        workers.shutdown(wait=True, kill_workers=kill)


STOP_FILE = "stop"  # in JOBS_DIR: the sweep was interrupted; a job that starts after it does not run
stopped_by = []  # the signal that stopped this process's side-by-side sweep, once one has (SweepProgress.stop)
on_stop = []  # what else stops the jobs then: the Ray launcher's cancel of its tasks, on other machines
where_jobs_run = []  # what a launcher of jobs on other machines says of them ("on a Ray cluster of 2 nodes, 4 CPUs")


def lines_into(callbacks, folder: Path):
    """In a Ray worker: the sweep's callback writes the job's line into folder, returned to the driver with the job's
    records, and leaves the worker's session as Ray runs it."""
    for callback in getattr(callbacks, "callbacks", []):
        if isinstance(callback, SweepProgress):
            callback.sweep_dir, callback.leads_session = folder, False


def enter_worker():
    """In a side-by-side job's worker, before its job: a session of its own, so that Ctrl-C at the
    terminal reaches the sweep's process alone, which passes it on once to each worker (pass_on); the
    worker dies with the sweep's process, as ranks and forkservers do (train/launch/forkserver.py); and
    outside its run the worker holds that signal for the run (loky's default raised KeyboardInterrupt)."""
    from train.process import end_with_parent

    if os.getsid(0) != os.getpid():
        for signum in (signal.SIGINT, signal.SIGTERM):  # first: once a session leader, pass_on may signal it
            signal.signal(signum, hold_signal)
        os.setsid()
        end_with_parent()


def stopped(sweep_dir) -> bool:
    """A side-by-side sweep that was interrupted: the jobs still queued end at once, without a run."""
    return (Path(sweep_dir) / JOBS_DIR / STOP_FILE).exists()


def pass_on(signum, sweep_dir: Path):
    """The sweep's process got SIGINT or SIGTERM: queued jobs are not to run, and each worker (a session
    leader of ours, see enter_worker) gets the signal once; their jobs stop as a single run does."""
    (sweep_dir / JOBS_DIR).mkdir(parents=True, exist_ok=True)
    (sweep_dir / JOBS_DIR / STOP_FILE).write_text(signal.Signals(signum).name + "\n")
    import psutil

    for child in psutil.Process().children():
        try:
            if os.getsid(child.pid) == child.pid:
                child.send_signal(signum)
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    for stop in list(on_stop):
        stop()


def job_verdict(output_dir, status: str) -> str:
    """The verdict from the job's summary.json, and the job's status when it is not a plain result."""
    summary = Path(output_dir) / "summary.json"
    verdict = None
    try:
        verdict = json.loads(summary.read_text()).get("verdict")
    except (OSError, ValueError):
        pass
    if verdict is None:
        return status
    return verdict if status in ("ok", "n/a") else f"{verdict} ({status})"


ELSEWHERE = ("hydra_plugins.hydra_joblib_launcher.", "hydra_plugins.race_lab_ray_launcher.")  # jobs, ray


def side_by_side(hydra_cfg) -> bool:
    """The sweep's jobs run in worker processes (hydra/launcher=jobs or ray), not in this one."""
    return str(hydra_cfg.launcher.get("_target_", "")).startswith(ELSEWHERE)


CELL_SWEEPER = "hydra_plugins.race_lab_sweeper.CellSweeper"  # configs/train.yaml's: it leaves n/a jobs out


def planned(callbacks, total: int, left_out: int):
    """From race-lab's sweeper, once it knows which jobs run: the sweep's progress starts (SweepProgress.begin)."""
    for callback in getattr(callbacks, "callbacks", []):
        if isinstance(callback, SweepProgress) and callback.total is not None:
            callback.begin(total, left_out)


class SweepProgress(Callback):
    total = None  # set when a sweep starts; a single run (no -m) leaves it None and is left alone
    in_worker = False  # True in the copy that a side-by-side job's worker process gets
    leads_session = True  # that worker takes a session of its own (enter_worker); a Ray worker is Ray's to run
    progress = None  # the jobs' progress (begin), unless launch.job_lines or echo_ranks print a line per job

    def __getstate__(self):
        """The copy that goes to a worker with each side-by-side job: no threads, no open files."""
        return {"total": self.total, "sweep_dir": getattr(self, "sweep_dir", None), "in_worker": True,
                "echo": getattr(self, "echo", False)}

    def on_multirun_start(self, config, **kwargs):
        self.total = count_jobs(config.hydra.overrides.task)  # race-lab's sweeper then says how many run (begin)
        self.sweep_dir = Path(config.hydra.sweep.dir)
        self.ended, self.failed, self.progress = 0, [], None
        self.drawing, self.timelines = ThreadPoolExecutor(1, "timelines", draw_at_low_priority), {}
        self.over = threading.Event()
        self.echo = bool(config.get("launch", {}).get("echo_ranks", False))
        self.job_lines = self.echo or bool(config.get("launch", {}).get("job_lines", False))
        self.side_by_side = side_by_side(config.hydra)
        if not self.echo:  # Hydra's own line per job would repeat ours
            for name in HYDRA_LAUNCHER_LOGS:
                logging.getLogger(name).setLevel(logging.WARNING)
        self.at_a_time = ""
        if self.side_by_side and "n_jobs" in config.hydra.launcher:
            from joblib import effective_n_jobs  # -1: one per core

            self.at_a_time = f", {effective_n_jobs(config.hydra.launcher.n_jobs)} at a time"
        if config.hydra.sweeper.get("_target_") != CELL_SWEEPER:
            self.begin(self.total, 0)

    def begin(self, total: int, left_out: int):
        """The sweep's first line, once it is known which jobs run; left_out: the n/a ones, not launched."""
        self.total = total
        if self.side_by_side and not self.at_a_time and where_jobs_run:  # said by the Ray launcher's setup
            self.at_a_time = f", {where_jobs_run[-1]}"
        not_run = f"; {left_out} n/a job{'s' * (left_out != 1)} left out, not run (not_run.json)" if left_out else ""
        print(f"[sweep] {self.total} jobs into {self.sweep_dir}{self.at_a_time}{not_run}", flush=True)
        if not self.job_lines:
            self.progress = JobsProgress(self.total, "[sweep]")
        if self.side_by_side:
            self.signal = None  # the signal that stopped the sweep
            for signum in (signal.SIGINT, signal.SIGTERM):  # the jobs run elsewhere: pass it on, then wait
                signal.signal(signum, self.stop)
            self.returned = threading.Event()  # set once the launcher has returned
            self.watcher = threading.Thread(target=self.watch_jobs, name="sweep-jobs", daemon=True)
            self.watcher.start()

    def stop(self, signum, frame):
        if self.signal is None:
            self.signal = signal.Signals(signum).name
            stopped_by.append(self.signal)
            pass_on(signum, self.sweep_dir)

    def on_job_start(self, config, **kwargs):
        if self.total is None:
            return
        if self.in_worker and self.leads_session:
            enter_worker()
        self.job_started = time.monotonic()
        point = " ".join(config.hydra.overrides.task)
        k = config.hydra.job.num + 1
        if self.echo:
            print(f"\n[sweep] job {k} of {self.total}: {point}", flush=True)

    def on_job_end(self, config, job_return, **kwargs):
        if self.total is None:
            return
        seconds = time.monotonic() - self.job_started
        ok = job_return.status == JobStatus.COMPLETED
        status = job_return.return_value if ok else "crashed"
        ended = {"k": config.hydra.job.num + 1, "point": " ".join(config.hydra.overrides.task), "status": status,
                 "seconds": seconds, "output_dir": config.hydra.runtime.output_dir}
        if self.in_worker:  # the sweep's process prints it (watch_jobs)
            from train.report.files import write_json_atomic

            (self.sweep_dir / JOBS_DIR).mkdir(exist_ok=True)
            write_json_atomic(self.sweep_dir / JOBS_DIR / f"{ended['k']}.json", ended)
            return
        self.job_ended(**ended)

    def watch_jobs(self):
        """Side by side: each job's line, as its worker's file comes, until the last job's (or the sweep
        is over: a job that raised writes none)."""
        seen, last_look = set(), False
        while self.ended < self.total and not last_look:
            last_look = self.returned.is_set()  # every worker has written its file by then
            for path in sorted((self.sweep_dir / JOBS_DIR).glob("*.json"), key=lambda p: int(p.stem)):
                if path.name not in seen:
                    seen.add(path.name)
                    self.job_ended(**json.loads(path.read_text()), draw_now=True)
            self.returned.wait(0.1)

    def job_ended(self, k: int, point: str, status: str, seconds: float, output_dir: str, draw_now=False):
        """One job's line (or the progress), its timeline drawn at low priority; after the last job, the report."""
        self.ended += 1
        if status not in ("ok", "n/a"):
            self.failed.append(f"job {k} ({point}): {status}")
        run_dir = Path(output_dir)
        if draw_now and not stopped_by:  # side by side: the sweep's process has nothing else to do
            self.timelines[run_dir] = self.drawing.submit(draw_timeline_now, run_dir)
        elif not stopped_by:  # interrupted: the sweep ends now; `python -m train.report` draws what is left
            self.timelines[run_dir] = self.drawing.submit(draw_once_launched, run_dir, self.over)
        verdict = job_verdict(output_dir, status)
        if self.progress is not None:
            self.progress.ended(verdict)
        else:
            print(job_line(k, self.total, point, verdict, seconds), flush=True)
        if self.ended == self.total and not self.side_by_side:  # here, not on_multirun_end, which Hydra
            self.finish()  # skips when a job raised

    def on_multirun_end(self, config, **kwargs):
        """Side by side: the jobs are over; the watcher prints what it has not yet, then the report. A sweep
        whose every job was n/a (none launched) writes its report here too."""
        if self.total is None:
            return
        if not getattr(self, "side_by_side", False):
            if self.total == 0:
                self.finish()
            return
        stop_workers(kill=self.signal is not None)
        self.returned.set()
        self.watcher.join()  # it has read every job's file: the last written before the launcher returned
        self.close_progress()
        if self.signal:  # as a sweep in one process ends on an interrupt: no report, exit 130
            self.drawing.shutdown(wait=False, cancel_futures=True)  # the exit waits for one in flight only
            print(f"\n[sweep] stopped by {self.signal}; the jobs that ran are in {self.sweep_dir}",
                  file=sys.stderr, flush=True)
            self.over.set()
            sys.exit(130)
        self.finish()

    def close_progress(self):
        if self.progress is not None:
            self.progress.close()

    def finish(self):
        from train.report.runs import write_report

        self.close_progress()
        self.over.set()
        self.drawing.shutdown(wait=True, cancel_futures=True)  # the queued ones are drawn below, at full priority
        drawn = {run for run, done in self.timelines.items()
                 if not done.cancelled() and done.exception() is None and done.result()}
        print("\n" + write_report(self.sweep_dir, drawn), flush=True)  # draws what the thread did not
        if self.failed:
            print(f"[sweep] {len(self.failed)} of {self.total} jobs did not give a result:\n  "
                  + "\n  ".join(self.failed), file=sys.stderr)
            sys.exit(1)
