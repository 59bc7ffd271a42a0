"""A sweep's jobs on a running Ray cluster (hydra/launcher=ray; the launcher class is
plugins/hydra_plugins/race_lab_ray_launcher.py). Each job is one Ray task that reserves its ranks' CPUs (and GPUs
with device=cuda) on one node, runs the job as the local launcher does and returns its records: the run dir, packed,
and what the sweep's lines read (.jobs/<num>.json). The driver unpacks them where the local launcher would have
written them, so the report, matrix.html and check.json are made as they are today, with no shared filesystem.

Ray never retries a job (max_retries=0: a cell run twice would overwrite itself). A job whose worker or node was
lost is that job's harness error, named (verdict error, status lost): never a race, and the other jobs go on.
Ctrl-C on the driver cancels every task: a running job gets SIGINT as a single run does and stops."""
import io
import json
import os
import shutil
import socket
import tarfile
import tempfile
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals
from omegaconf import OmegaConf, open_dict, read_write

from train.config import ConfigError
from train.launch import sweep

NODE_FILE = "node.json"  # in each run dir: the Ray node that ran the job
LOST = "lost"  # the status of a job whose worker or node died


def connect(address: str):
    """Join the running cluster at address (auto: the one this machine's `ray start` joined); one line if none."""
    import ray

    if ray.is_initialized():
        return
    host, _, port = address.rpartition(":")
    if host and port.isdigit():  # Ray itself retries a dead address for about 20 s before it says so
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as e:
            raise ConfigError(f"hydra.launcher.address={address}: no Ray cluster answers there ({e.strerror or e}); "
                              "start one with `ray start --head`, or leave hydra/launcher=ray out to run here") from None
    try:
        ray.init(address=address, logging_level="WARNING", configure_logging=True, log_to_driver=True)
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise ConfigError(f"hydra.launcher.address={address}: no Ray cluster to join ({str(e).splitlines()[0]}); "
                          "start one with `ray start --head`, or leave hydra/launcher=ray out to run here") from None
    free = ray.cluster_resources().get("CPU", 0)
    if not free:
        ray.shutdown()
        raise ConfigError(f"hydra.launcher.address={address}: the Ray cluster has no CPUs to run jobs on")


def cluster_words() -> str:
    """', on a Ray cluster of 2 nodes, 4 CPUs' for the sweep's first line."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    cpus = int(ray.cluster_resources().get("CPU", 0))
    return f"on a Ray cluster of {len(nodes)} node{'s' * (len(nodes) != 1)}, {cpus} CPUs"


def job_config(hydra_context, config, overrides, idx: int):
    """The job's composed config, as Hydra's joblib launcher makes it (its num and id set)."""
    sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
        sweep_config.hydra.job.num = idx
    return sweep_config


def reserves(sweep_config) -> dict:
    """What one job takes of a node: a CPU per rank on it, and a GPU per rank with device=cuda."""
    ranks = max(1, int(sweep_config.world_size) // max(1, int(sweep_config.nnodes)))
    return {"num_cpus": ranks, "num_gpus": ranks if sweep_config.get("device") == "cuda" else 0}


def pack(folder: Path) -> bytes:
    """The folder as a gzipped tar, its paths relative to it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=".")
    return buffer.getvalue()


def unpack(data: bytes, folder: Path):
    """A pack() into folder; members that would land outside it, links or devices are refused (tarfile's data filter)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(folder, filter="data")


def this_node() -> dict:
    import ray

    context = ray.get_runtime_context()
    return {"node_id": context.get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}


def run_on_node(sweep_config, hydra_context, task_function, singleton_state, driver_node: str):
    """In a Ray worker: one job, as hydra's joblib launcher runs it, then its records. The sweep's callback writes
    the job's line into a folder of this task's own, returned with the run dir. On a node other than the driver's,
    the run dir is removed once packed: the driver holds it then, and nothing of the job is left on the node."""
    setup_globals()
    Singleton.set_state(singleton_state)
    lines = Path(tempfile.mkdtemp(prefix="race-lab-job-"))
    sweep.lines_into(hydra_context.callbacks, lines)
    HydraConfig.instance().set_config(sweep_config)
    returned = run_job(hydra_context=hydra_context, config=sweep_config, task_function=task_function,
                       job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    node = this_node()
    run_dir = Path(sweep_config.hydra.runtime.output_dir)
    (run_dir / NODE_FILE).write_text(json.dumps(node) + "\n")
    packed = pack(run_dir) if run_dir.exists() else None
    ended = [json.loads(p.read_text()) for p in (lines / ".jobs").glob("*.json")]
    shutil.rmtree(lines, ignore_errors=True)
    if node["node_id"] != driver_node:
        shutil.rmtree(run_dir, ignore_errors=True)
    returned.hydra_cfg = None  # the driver has the config; the job's HydraConfig need not travel back
    return returned, packed, ended[0] if ended else None


def lost_job(sweep_config, overrides, error: BaseException) -> dict:
    """A job that gave no records (its worker or node died): its run dir holds its config and a summary.json that
    names what happened, verdict error (the harness's, never a race), so the report counts it as a job that ran and
    gave no result. What the job wrote before on a disk the driver sees is kept."""
    from train.report.files import write_json_atomic

    HydraConfig.instance().set_config(sweep_config)  # the subdir's ${hydra:...} resolve against it
    run_dir = Path(sweep_config.hydra.sweep.dir) / str(sweep_config.hydra.sweep.subdir)
    with read_write(sweep_config.hydra.runtime), open_dict(sweep_config.hydra.runtime):
        sweep_config.hydra.runtime.output_dir = str(run_dir.resolve())
    HydraConfig.instance().set_config(sweep_config)
    task = OmegaConf.masked_copy(sweep_config, [k for k in sweep_config if k != "hydra"])
    hydra_dir = run_dir / ".hydra"
    hydra_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(task, hydra_dir / "config.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": sweep_config.hydra}), hydra_dir / "hydra.yaml")
    OmegaConf.save(OmegaConf.create(list(overrides)), hydra_dir / "overrides.yaml")
    first = str(error).strip().splitlines()[0].split(". ")[0] if str(error).strip() else ""  # Ray's first sentence
    why = f"the job was lost on the Ray cluster: {type(error).__name__}" + (f": {first}" if first else "")
    cfg = {**OmegaConf.to_container(task, resolve=True), "scenario": sweep_config.hydra.runtime.choices.get("scenario")}
    write_json_atomic(run_dir / "summary.json", {"status": LOST, "verdict": "error", "explanation": why,
                                                 "config": cfg, "ranks": []})
    return {"k": int(sweep_config.hydra.job.num) + 1, "point": " ".join(overrides), "status": f"{LOST}: {why}",
            "seconds": 0.0, "output_dir": str(run_dir.resolve())}


def lost_return(sweep_config, status: str = LOST) -> JobReturn:
    """A lost (or never started) job's return: completed, as a crashed job's is, so that the sweep goes on."""
    returned = JobReturn(overrides=[], cfg=sweep_config, hydra_cfg=None, working_dir=os.getcwd(),
                         task_name=str(sweep_config.hydra.job.name), status=JobStatus.COMPLETED)
    returned.return_value = status
    return returned
