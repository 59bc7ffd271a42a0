"""Ray Train's driver (the contract's own_workers: race-lab runs this one process): a lean local Ray of the run's
own (no dashboard, world_size CPUs, its temp dir under the run dir), a TorchTrainer of world_size CPU workers over
gloo running resume.py's train function, and Ray shut down whatever happens. The trainer as Ray's docs show it:

    TorchTrainer(train_fn, scaling_config=ScalingConfig(num_workers=world_size, use_gpu=False),
                 run_config=RunConfig(storage_path, name, checkpoint_config=CheckpointConfig(num_to_keep),
                                      failure_config=FailureConfig(max_failures)))

checkpoint.keep_last is num_to_keep (0: keep all), launch.max_restarts is max_failures: Ray restarts the workers,
not torch elastic (which starts this driver once). The storage is the local disk through the observed filesystem
(seams.py). Ray's processes (GCS, raylet, workers) end with ray.shutdown, and with this process if it is killed:
Ray's own fate sharing with the driver that started them (tests/e2e/frameworks/test_ray_train.py checks both).

ray is imported when the driver runs, not when the forkserver imports this module (its preload): the forkserver
that forks every rank stays without Ray. The dispatch (BY_FIX, ways.py) is named here, the workload's module, for
the contract's tests, which read it without importing Ray.
"""
import os
import shutil
import tempfile
from pathlib import Path

from train.frameworks.ray_train.ways import BY_FIX  # noqa: F401  (the workload's dispatch, read by the contract's tests)
from train.process import at_session_end
from train.toolkit.rank import Rank, checkpoint_dir


LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
TEMP_MAX = 40  # characters: Ray's unix sockets, <temp>/session_<time>_<pid>/sockets/plasma_store, must fit in 107


def fit_and_resume(rank: Rank):
    # Ray's switch for a cluster of this one host (ray_constants.ENABLE_RAY_CLUSTER, off by default only on Windows
    # and macOS), read as ray is imported: every node address is loopback, where TorchTrainer's process group meets.
    # Without it the workers take the host's routed address, which here takes no connection (a TCPStore timed out).
    os.environ[LOCAL_ONLY] = "0"  # inherited by Ray's processes, which this one starts
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from train.frameworks.ray_train.resume import train_loop_per_worker
    from train.frameworks.ray_train.seams import observed_storage

    cfg = rank.cfg
    folder = Path(checkpoint_dir(cfg)).resolve()
    if not cfg["checkpoint"]["keep_existing"]:
        shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(rank.run_dir).resolve() / "ray"
    if len(str(temp)) > TEMP_MAX:
        temp = Path(tempfile.mkdtemp(prefix="race-lab-ray-"))
        at_session_end(lambda: shutil.rmtree(temp, ignore_errors=True))  # also when the driver is stopped at once
    ray.init(num_cpus=cfg["world_size"], include_dashboard=False, _temp_dir=str(temp), configure_logging=False,
             log_to_driver=True)
    try:
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config={"cfg": cfg, "plan": rank.plan, "run_dir": str(Path(rank.run_dir).resolve())},
            torch_config=TorchConfig(backend=rank.plan["backend"], timeout_s=int(cfg["timeout"]["collective_s"])),
            scaling_config=ScalingConfig(num_workers=cfg["world_size"], use_gpu=False),
            run_config=RunConfig(
                name=folder.name, storage_path=str(folder.parent), storage_filesystem=observed_storage(),
                checkpoint_config=CheckpointConfig(num_to_keep=cfg["checkpoint"]["keep_last"] or None),
                failure_config=FailureConfig(max_failures=cfg["launch"]["max_restarts"])))
        trainer.fit()
    finally:
        ray.shutdown()
