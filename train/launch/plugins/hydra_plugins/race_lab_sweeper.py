"""race-lab's Hydra sweeper (configs/train.yaml's hydra.sweeper): Hydra's basic sweeper, less the jobs whose cell
is n/a. Those are left out before any job is launched (train/launch/cells.py) and recorded in not_run.json;
the jobs that run are one multirun as before. Hydra finds sweepers only in the hydra_plugins namespace:
train/launch/job.py puts this folder's parent on sys.path. Imports nothing of race-lab until a sweep starts.
"""
from pathlib import Path

# Private: Hydra's basic sweeper is not public API (hydra-core is pinned in requirements.lock). If it moves, what is
# lost is leaving the n/a jobs out before the sweep: configs/train.yaml's hydra.sweeper back to `basic` launches them
# as before, each refusing its cell (slower, the same matrix).
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


class CellSweeper(BasicSweeper):
    def split_arguments(self, overrides, max_batch_size):
        """BasicSweeper's batches, of the jobs that run; each cell's config composed once, here."""
        from train.launch.cells import split_jobs, write_not_run
        from train.launch.sweep import planned

        jobs = [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
        loader = self.hydra_context.config_loader
        run, left_out = split_jobs(jobs, lambda job: loader.load_sweep_config(self.config, list(job)))
        sweep_dir = Path(self.config.hydra.sweep.dir)
        if left_out:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            write_not_run(sweep_dir, left_out)
        planned(self.hydra_context.callbacks, len(run), len(left_out))
        self.composed = True
        return [] if not run else list(self.split_overrides_to_chunks(run, max_batch_size))

    def validate_batch_is_legal(self, batch):
        """Every cell's config was composed in split_arguments, which raised as this would; its other jobs differ
        only in their repeat label."""
        if not getattr(self, "composed", False):
            super().validate_batch_is_legal(batch)
