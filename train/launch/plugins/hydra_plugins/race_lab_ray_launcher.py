"""race-lab's Hydra launcher for a running Ray cluster (configs/hydra/launcher/ray.yaml: `hydra/launcher=ray`):
each job one Ray task on one node, its records returned to this process (train/launch/ray_jobs.py says how).
Imports nothing of race-lab or Ray until a sweep sets it up."""
from pathlib import Path

from hydra.core.singleton import Singleton
from hydra.plugins.launcher import Launcher


class RayLauncher(Launcher):
    def __init__(self, address: str = "auto"):
        self.address = str(address)
        self.config = self.task_function = self.hydra_context = None

    def setup(self, *, hydra_context, task_function, config):
        """Joins the cluster now, before the sweep writes anything: no cluster is one line, exit 2."""
        from train.launch import sweep
        from train.launch.ray_jobs import cluster_words, connect

        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context
        connect(self.address)
        sweep.where_jobs_run.append(cluster_words())

    def launch(self, job_overrides, initial_job_idx):
        import ray
        from ray.exceptions import RayError, TaskCancelledError

        from train.launch import sweep
        from train.launch.ray_jobs import connect, job_config, lost_job, lost_return, reserves, run_on_node, unpack
        from train.report.files import write_json_atomic

        connect(self.address)
        jobs_dir = Path(str(self.config.hydra.sweep.dir)) / sweep.JOBS_DIR
        jobs_dir.mkdir(parents=True, exist_ok=True)
        driver_node = ray.get_runtime_context().get_node_id()
        shared = [ray.put(x) for x in (self.hydra_context, self.task_function, Singleton.get_state())]
        task = ray.remote(run_on_node)
        configs, refs = [], {}
        for i, overrides in enumerate(job_overrides):  # each job's config composed once, here; it travels with it
            idx = initial_job_idx + i
            configs.append(job_config(self.hydra_context, self.config, overrides, idx))
            ref = task.options(max_retries=0, name=f"race-lab job {idx + 1}", **reserves(configs[-1])).remote(
                configs[-1], *shared, driver_node)
            refs[ref] = i

        pending = list(refs)

        def cancel():
            for ref in pending:
                ray.cancel(ref)  # a running job gets SIGINT and stops as a single run does; a queued one never starts

        sweep.on_stop.append(cancel)
        results = [None] * len(configs)
        try:
            while pending:
                done, pending[:] = ray.wait(pending, num_returns=1, timeout=0.5)
                for ref in done:
                    i = refs[ref]
                    try:
                        returned, packed, ended = ray.get(ref)
                    except TaskCancelledError:  # interrupted before it started: not run, no line
                        results[i] = lost_return(configs[i], "not run")
                        continue
                    except RayError as e:  # its worker or node died: that job's harness error, the others go on
                        ended, results[i] = lost_job(configs[i], job_overrides[i], e), lost_return(configs[i])
                    else:
                        results[i] = returned
                        if packed is not None and ended is not None:
                            run_dir = Path(ended["output_dir"])
                            if not run_dir.exists():  # ran on another node: its records come back through Ray
                                unpack(packed, run_dir)
                    if ended is not None:
                        write_json_atomic(jobs_dir / f"{ended['k']}.json", ended)
        finally:
            sweep.on_stop.remove(cancel)
            ray.shutdown()
        for returned, cfg in zip(results, configs):
            returned.cfg = cfg
        return results
