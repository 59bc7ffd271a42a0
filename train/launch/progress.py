"""How far the jobs of a sweep, the matrix or race-lab check are, on the console: one bar for all three (rich's),
with the jobs done, held and raced so far and the time left. With no terminal (a CI log, a pipe) a plain line each
time another tenth of the jobs has ended instead, but for the last job (what is printed next says it all): at most
nine lines. launch.job_lines=true: a line per job (the sweep's `[sweep] job k of n: ...`, train/launch/sweep.py)
in place of the bar.
"""
import atexit
import sys
import time
from collections import Counter

from train.report.check_card import HELD


def tally(verdict: str) -> str:
    """held, raced or no verdict: a job's verdict as the check counts a run (train/report/check_card.py). A job's
    verdict may carry its status after it ('race (missed expect)'), or be a status alone ('crashed')."""
    first = verdict.split(" ", 1)[0]
    if first in HELD:
        return "held"
    if first == "race":
        return "raced"
    return "no verdict"


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class JobsProgress:
    """`ended(verdict)` once a job ends; `say(line)` prints a line (above the bar on a terminal); `close()` at the end.
    The time left is the time so far over the jobs done, times the jobs left: right for jobs side by side too."""

    def __init__(self, total: int, prefix: str, out=None, tty=None):
        self.total, self.prefix, self.out = total, prefix, out or sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self.counts: Counter = Counter()
        self.started = time.monotonic()
        self.tenths_said = 0
        self.bar = None
        if self.tty and total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self.bar = Progress(TextColumn(f"{prefix} jobs"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[so_far]}"),
                                console=Console(file=self.out, highlight=False), transient=False)
            self.task = self.bar.add_task("jobs", total=total, so_far=self.so_far())
            self.bar.start()
            atexit.register(self.close)  # an interrupted sweep's bar gives the terminal its cursor back too

    @property
    def done(self) -> int:
        return sum(self.counts.values())

    def seconds_left(self):
        if not self.done:
            return None
        return (time.monotonic() - self.started) / self.done * (self.total - self.done)

    def so_far(self) -> str:
        """`3 held, 1 raced[, 1 no verdict]; ~1m20s left`."""
        parts = [f"{self.counts['held']} held", f"{self.counts['raced']} raced"]
        if self.counts["no verdict"]:
            parts.append(f"{self.counts['no verdict']} no verdict")
        left = self.seconds_left()
        return ", ".join(parts) + ("" if left is None else f"; ~{format_duration(left)} left")

    def ended(self, verdict: str):
        self.counts[tally(verdict)] += 1
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, so_far=self.so_far())
            return
        tenths = self.done * 10 // self.total if self.total else 10
        if self.tenths_said < tenths < 10:  # the last job's line would say what the card or report says next
            self.tenths_said = tenths
            self.say(f"{self.prefix} {self.done} of {self.total} jobs ({100 * self.done // self.total}%): "
                     f"{self.so_far()}")

    def say(self, line: str):
        if self.bar is not None:
            self.bar.console.print(line, markup=False, soft_wrap=True)
        else:
            print(line, file=self.out, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
