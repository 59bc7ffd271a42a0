"""Hydra callback for sweeps (-m): one line per job as it ends (the point, the verdict, its seconds),
with a progress bar and an estimate of the time left when the console is a terminal; plain lines
in a log or CI. Each job's timeline.png is drawn by a low-priority thread while the next job runs.
After the last job it writes the sweep report and prints its table. Exits 1 at
the end when a job had a bad config, crashed, or missed its `expect`; a job whose verdict is race
is a result.

Each rank's full output stays in its run dir (logs/, and the launcher's table in console.log);
launch.echo_ranks=true prints it on the console too, as a single run does.
"""
import json
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback

HYDRA_LAUNCHER_LOG = "hydra._internal.core_plugins.basic_launcher"  # "Launching N jobs", "#k : point"


def count_jobs(task_overrides) -> int:
    """How many jobs Hydra's basic sweeper makes of these command-line overrides."""
    overrides = OverridesParser.create().parse_overrides(list(task_overrides))
    return sum(len(batch) for batch in BasicSweeper.split_arguments(overrides, None))


def job_line(k: int, total: int, point: str, verdict: str, seconds: float) -> str:
    return f"[sweep] job {k} of {total}: {point}  {verdict}  {seconds:.1f} s"


def progress_bar(done: int, total: int, seconds_left, width: int = 24) -> str:
    filled = round(width * done / total) if total else width
    left = "" if seconds_left is None else f"  ~{format_duration(seconds_left)} left"
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} jobs{left}"


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def draw_at_low_priority():
    """The drawing thread yields the cores to the ranks (Linux sets a priority per thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


def draw_once_launched(run_dir: Path, sweep_over: threading.Event) -> bool:
    """A job's timeline, drawn once the next job has launched (its ranks then train and stall while
    the launcher waits), so that it does not slow the launcher between jobs; or at the sweep's end."""
    from train.launch import started
    from train.report import draw_timeline

    while not (started() or sweep_over.is_set()):
        time.sleep(0.05)
    return draw_timeline(run_dir)


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


class SweepProgress(Callback):
    total = None  # set when a sweep starts; a single run (no -m) leaves it None and is left alone

    def on_multirun_start(self, config, **kwargs):
        self.total = count_jobs(config.hydra.overrides.task)
        self.sweep_dir = Path(config.hydra.sweep.dir)
        self.ended, self.failed, self.durations = 0, [], []
        self.drawing, self.timelines = ThreadPoolExecutor(1, "timelines", draw_at_low_priority), {}
        self.over = threading.Event()
        self.echo = bool(config.get("launch", {}).get("echo_ranks", False))
        self.tty = sys.stdout.isatty()
        if not self.echo:  # Hydra's own line per job would repeat ours
            logging.getLogger(HYDRA_LAUNCHER_LOG).setLevel(logging.WARNING)
        print(f"[sweep] {self.total} jobs into {self.sweep_dir}", flush=True)

    def on_job_start(self, config, **kwargs):
        if self.total is None:
            return
        self.job_started = time.monotonic()
        point = " ".join(config.hydra.overrides.task)
        k = config.hydra.job.num + 1
        if self.echo:
            print(f"\n[sweep] job {k} of {self.total}: {point}", flush=True)
        elif self.tty:
            self.draw_bar(f"  job {k}: {point}")

    def on_job_end(self, config, job_return, **kwargs):
        if self.total is None:
            return
        self.ended += 1
        seconds = time.monotonic() - self.job_started
        self.durations.append(seconds)
        ok = job_return.status == JobStatus.COMPLETED
        status = job_return.return_value if ok else "crashed"
        point = " ".join(config.hydra.overrides.task)
        k = config.hydra.job.num + 1
        if status not in ("ok", "n/a"):
            self.failed.append(f"job {k} ({point}): {status}")
        run_dir = Path(config.hydra.runtime.output_dir)
        self.timelines[run_dir] = self.drawing.submit(draw_once_launched, run_dir, self.over)
        line = job_line(k, self.total, point, job_verdict(config.hydra.runtime.output_dir, status), seconds)
        if self.tty and not self.echo:
            sys.stdout.write("\r\033[K")  # the bar's line becomes the job's
        print(line, flush=True)
        if self.tty and not self.echo and self.ended < self.total:
            self.draw_bar()
        if self.ended == self.total:  # here, not on_multirun_end, which Hydra skips when a job raised
            self.finish()

    def seconds_left(self):
        if not self.durations:
            return None
        return sum(self.durations) / len(self.durations) * (self.total - self.ended)

    def draw_bar(self, running: str = ""):
        bar = progress_bar(self.ended, self.total, self.seconds_left()) + running
        sys.stdout.write("\r\033[K" + bar)
        sys.stdout.flush()

    def finish(self):
        from train.report import write_report

        self.over.set()
        self.drawing.shutdown(wait=True)
        drawn = {run for run, done in self.timelines.items() if done.exception() is None and done.result()}
        print("\n" + write_report(self.sweep_dir, drawn), flush=True)  # draws what the thread did not
        if self.failed:
            print(f"[sweep] {len(self.failed)} of {self.total} jobs did not give a result:\n  "
                  + "\n  ".join(self.failed), file=sys.stderr)
            sys.exit(1)
