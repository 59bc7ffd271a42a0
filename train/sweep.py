"""Hydra callback for sweeps (-m): prints `job k of n` as jobs start and, after the last
job, writes the sweep report and prints its table. Exits 1 at the end when a job had a
bad config, crashed, or missed its `expect`; a job whose verdict is race is a result."""
import sys
from pathlib import Path

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback


def count_jobs(task_overrides) -> int:
    """How many jobs Hydra's basic sweeper makes of these command-line overrides."""
    overrides = OverridesParser.create().parse_overrides(list(task_overrides))
    return sum(len(batch) for batch in BasicSweeper.split_arguments(overrides, None))


class SweepProgress(Callback):
    total = None  # set when a sweep starts; a single run (no -m) leaves it None and is left alone

    def on_multirun_start(self, config, **kwargs):
        self.total = count_jobs(config.hydra.overrides.task)
        self.sweep_dir = Path(config.hydra.sweep.dir)
        self.ended, self.failed = 0, []
        print(f"[sweep] {self.total} jobs into {self.sweep_dir}", flush=True)

    def on_job_start(self, config, **kwargs):
        if self.total is None:
            return
        point = " ".join(config.hydra.overrides.task)
        print(f"\n[sweep] job {config.hydra.job.num + 1} of {self.total}: {point}", flush=True)

    def on_job_end(self, config, job_return, **kwargs):
        if self.total is None:
            return
        self.ended += 1
        ok = job_return.status == JobStatus.COMPLETED
        status = job_return.return_value if ok else "crashed"
        if status not in ("ok", "n/a"):
            self.failed.append(f"job {config.hydra.job.num + 1} ({' '.join(config.hydra.overrides.task)}): {status}")
        if self.ended == self.total:  # here, not on_multirun_end, which Hydra skips when a job raised
            self.finish()

    def finish(self):
        from train.report import write_report

        print("\n" + write_report(self.sweep_dir), flush=True)
        if self.failed:
            print(f"[sweep] {len(self.failed)} of {self.total} jobs did not give a result:\n  "
                  + "\n  ".join(self.failed), file=sys.stderr)
            sys.exit(1)
