"""make bench --only cluster: the Ray launcher (hydra/launcher=ray) against the joblib launcher, side by side in one
run. A Ray cluster is started on this host for it (`ray start`, each node with its own temp folder), and stopped after.

- The same sweep (torch_loop, crash_mid_save x rank0_leads, 2 ranks, --jobs repeats) runs three times: on the joblib
  launcher (2 jobs at a time), on a 1-node Ray cluster of 4 CPUs (2 jobs at a time) and on a 2-node cluster of 2 CPUs
  a node (one job a node at a time). Per-job overhead: (the 1-node Ray sweep's wall - the joblib sweep's) / jobs.
- On this machine both clusters share the same 2 cores: the 2-node figure says what spreading costs, not what a
  second machine would save.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

TAG = "RACE_LAB_BENCH_CLUSTER"  # in the environment of every process of the cluster: how stop() finds them
RAY = str(Path(sys.executable).parent / "ray")
POINT = ["framework=torch_loop", "world_size=2", "scenario=crash_mid_save", "fix=rank0_leads"]


class LocalCluster:
    """`ray start` nodes on this host: a head, then the others, each with cpus CPUs and its own temp folder."""

    def __init__(self, nodes: int, cpus: int, port: int = 6391):
        self.folder = Path(tempfile.mkdtemp(prefix="rl-bench-ray-", dir="/tmp"))  # Ray's socket paths stay short
        self.env = {**os.environ, TAG: self.folder.name, "RAY_AUTH_MODE": "disabled"}  # loopback only
        self.address = f"127.0.0.1:{port}"
        for k in range(nodes):
            where = ["--head", f"--port={port}", "--include-dashboard=false"] if k == 0 else [
                f"--address={self.address}"]
            subprocess.run([RAY, "start", *where, f"--num-cpus={cpus}", f"--temp-dir={self.folder / f'node{k}'}",
                            "--disable-usage-stats"], env=self.env, check=True, capture_output=True, timeout=180)

    def stop(self):
        for _ in range(3):
            for p in psutil.process_iter():
                try:
                    if p.environ().get(TAG) == self.folder.name:
                        p.kill()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            time.sleep(0.5)
        shutil.rmtree(self.folder, ignore_errors=True)


def timed_sweep(sweep_dir: Path, launcher: list, jobs: int, env=None) -> dict:
    from train.bench.measure import ROOT

    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "train", "-m", *launcher, *POINT, f"repeat=range({jobs})",
                           f"hydra.sweep.dir={sweep_dir}"], cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "console.log").write_text(proc.stdout + proc.stderr)
    verdicts = sorted(json.loads(p.read_text())["verdict"] for p in sweep_dir.glob("*/summary.json"))
    nodes = {json.loads(p.read_text())["node_id"] for p in sweep_dir.glob("*/node.json")}
    return {"exit_code": proc.returncode, "wall_s": round(wall, 3), "verdicts": verdicts, "nodes": len(nodes)}


def cluster_runs(out_dir: Path, jobs: int) -> dict:
    """The three sweeps, and the per-job overhead of the Ray launcher over the joblib launcher."""
    record = {"jobs": jobs, "joblib": timed_sweep(out_dir / "joblib", ["hydra/launcher=jobs",
                                                                       "hydra.launcher.n_jobs=2"], jobs)}
    for name, nodes, cpus in (("ray_1_node", 1, 4), ("ray_2_nodes", 2, 2)):
        cluster = LocalCluster(nodes, cpus)
        try:
            record[name] = timed_sweep(out_dir / name, ["hydra/launcher=ray", f"hydra.launcher.address="
                                                        f"{cluster.address}"], jobs, env=cluster.env)
        finally:
            cluster.stop()
    record["per_job_overhead_s"] = round((record["ray_1_node"]["wall_s"] - record["joblib"]["wall_s"]) / jobs, 3)
    return record
