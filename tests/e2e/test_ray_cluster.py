"""A sweep on a real Ray cluster (hydra/launcher=ray): two `ray start` nodes on this host, each with its own temp
folder and resources, as on two machines. The jobs spread over both nodes, each job's records come back to the
driver (a node other than the driver's keeps nothing of the job: they arrive through Ray), the verdicts are the
local launcher's; a node lost mid-sweep is its jobs' named harness error while the others finish; Ctrl-C stops
every task; nothing is left running. Every process of the cluster carries the test's tag (processes_tagged)."""
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, processes_tagged, tagged_env
from train.launch.nodes import free_port

RAY = str(Path(sys.executable).parent / "ray")
# the two jobs' scenarios and fixes: a race and its fix, of the resume after a crash (torch_loop's, a few s a job)
POINT = ["framework=torch_loop", "world_size=2", "scenario=crash_mid_save,cleanup", "fix=in_place,rank0_leads"]


class Cluster:
    def __init__(self, tag: str, folder: Path):
        self.tag, self.folder = tag, folder
        self.env = {**tagged_env(tag), "RAY_AUTH_MODE": "disabled"}  # loopback only; Ray's tokens are its docs'
        self.port = free_port(6380, 9000)  # below Ray's worker ports (10002-19999), which the GCS must not overlap
        self.address = f"127.0.0.1:{self.port}"

    def start_node(self, name: str, head: bool):
        where = ["--head", f"--port={self.port}", "--include-dashboard=false"] if head else [f"--address={self.address}"]
        subprocess.run([RAY, "start", *where, "--num-cpus=2", f"--resources={json.dumps({name: 1})}",
                        f"--temp-dir={self.folder / name}", "--disable-usage-stats"],
                       env=self.env, check=True, capture_output=True, timeout=120)

    def raylet(self, name: str) -> psutil.Process:
        for p in psutil.process_iter(["name", "cmdline"]):
            if p.info["name"] == "raylet" and any(str(self.folder / name) in a for a in p.info["cmdline"] or []):
                return p
        raise AssertionError(f"no raylet of {name}")

    def job_processes(self) -> list:
        """What a job started (its launcher's children, ranks), left running: the tagged processes not Ray's own."""
        return [(pid, cmd) for pid, cmd in processes_tagged(self.tag)
                if not cmd.startswith("ray::") and "/ray/" not in cmd]

    def sweep(self, sweep_dir: Path, *overrides, **popen):
        argv = [sys.executable, "-m", "train", "-m", "hydra/launcher=ray", f"hydra.launcher.address={self.address}",
                *overrides, f"hydra.sweep.dir={sweep_dir}"]
        return subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, **popen)

    def stop(self):
        """Every process of the cluster, and what its workers started, ended; their temp folders removed."""
        for _ in range(3):
            for pid, _cmd in processes_tagged(self.tag):
                try:
                    psutil.Process(pid).kill()
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.5)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    folder = Path(tempfile.mkdtemp(prefix="rl-ray-", dir="/tmp"))  # Ray's socket paths must stay short
    cluster = Cluster(f"ray-cluster-{folder.name}", folder)
    try:
        cluster.start_node("node1", head=True)
        cluster.start_node("node2", head=False)
        yield cluster
    finally:
        cluster.stop()
        assert not processes_tagged(cluster.tag), "the cluster left processes running"


def jobs(sweep_dir: Path) -> dict:
    """(scenario, fix) -> (summary, node.json or None, run dir) of each job in the sweep."""
    found = {}
    for summary_file in sweep_dir.glob("*/summary.json"):
        s, run = json.loads(summary_file.read_text()), summary_file.parent
        node = json.loads((run / "node.json").read_text()) if (run / "node.json").exists() else None
        found[(s["config"]["scenario"], s["config"]["fix"]["name"])] = (s, node, run)
    return found


def ended(proc, timeout=300) -> str:
    try:
        return proc.communicate(timeout=timeout)[0]
    finally:
        proc.kill()


def measured_here(*cells) -> dict:
    """(scenario, fix) -> the verdict the local launcher measured (docs/measured/torch_loop-*.csv)."""
    import csv

    rows = [row for path in sorted((ROOT / "docs" / "measured").glob("torch_loop-*.csv"))
            for row in csv.DictReader(path.open())]
    return {cell: next(r["verdict"] for r in rows if (r["scenario"], r["fix"]) == cell) for cell in cells}


@pytest.mark.slow
def test_a_matrix_on_two_ray_nodes_gives_the_local_launchers_verdicts_with_every_record_back(cluster, tmp_path):
    on_ray = cluster.sweep(tmp_path / "ray", *POINT)
    out = ended(on_ray)
    assert on_ray.returncode == 0, out[-3000:]
    assert "[sweep] 4 jobs into" in out and "on a Ray cluster of 2 nodes, 4 CPUs" in out
    ray_jobs = jobs(tmp_path / "ray")
    assert len(ray_jobs) == 4
    verdicts = {k: s["verdict"] for k, (s, _, _) in ray_jobs.items()}
    assert verdicts == measured_here(*verdicts)  # the local launcher's, measured (make measured)
    assert sorted(verdicts.values()) == ["clean", "clean", "race", "race"]
    assert len({node["node_id"] for _, node, _ in ray_jobs.values()}) == 2  # both nodes ran jobs
    for _, _, run in ray_jobs.values():  # each job's whole record is on the driver: events of both ranks, logs
        assert sorted(p.name for p in (run / "events").glob("rank*.jsonl")) == ["rank0.jsonl", "rank1.jsonl"]
        assert (run / ".hydra" / "config.yaml").exists() and (run / "timeline.png").exists()
    assert (tmp_path / "ray" / "matrix.csv").read_text().count("\n") == 5  # header and 4 cells, made on the driver
    assert not cluster.job_processes()


@pytest.mark.slow
def test_ctrl_c_on_the_driver_stops_every_ray_task_and_leaves_nothing(cluster, tmp_path):
    proc = cluster.sweep(tmp_path / "sweep", *POINT, "repeat=range(2)", start_new_session=True)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "sweep").glob("*/events/rank1.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.2)  # both ranks of a job on a node have begun
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out = ended(proc, timeout=60)
    took = time.monotonic() - sent
    assert proc.returncode == 130, out[-3000:]
    assert took < 30, f"{took:.1f} s to stop"
    assert "[sweep] stopped by SIGINT" in out
    time.sleep(2)  # the cancelled workers' children go with them
    assert not cluster.job_processes()
    assert len(list((tmp_path / "sweep").glob("*/summary.json"))) < 8  # not every job ran


@pytest.mark.slow
def test_a_node_lost_mid_sweep_is_its_jobs_named_harness_error_and_the_others_finish(cluster, tmp_path):
    """Last in this file: node2 stays dead."""
    proc = cluster.sweep(tmp_path / "sweep", *POINT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(
            p.name().startswith("ray::race-lab job") for p in cluster.raylet("node2").children()):
        time.sleep(0.2)
    time.sleep(2)  # its job has begun
    cluster.raylet("node2").kill()
    out = ended(proc)
    assert proc.returncode == 1, out[-3000:]  # a job gave no result
    found = jobs(tmp_path / "sweep")
    assert len(found) == 4
    lost = {k: s for k, (s, _, _) in found.items() if s["status"] == "lost"}
    assert lost, out[-3000:]
    for summary in lost.values():
        assert summary["verdict"] == "error"  # the harness's, never a race
        assert summary["explanation"].startswith("the job was lost on the Ray cluster: NodeDiedError")
    assert "lost: the job was lost on the Ray cluster" in out
    ran = {k: s["verdict"] for k, (s, _, _) in found.items() if k not in lost}
    assert ran and set(ran.values()) <= {"race", "clean"}
    assert (tmp_path / "sweep" / "report.md").read_text().count("| error 1 |") == len(lost)  # not counted
    time.sleep(2)
    assert not cluster.job_processes()


def test_no_ray_cluster_at_the_address_is_one_line_and_exit_2_before_anything_is_written(tmp_path):
    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "train", "-m", "hydra/launcher=ray",
                           f"hydra.launcher.address=127.0.0.1:{port}", *POINT, f"hydra.sweep.dir={tmp_path / 's'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"error: hydra.launcher.address=127.0.0.1:{port}: no Ray cluster answers there "
                                   "(Connection refused); start one with `ray start --head`, or leave "
                                   "hydra/launcher=ray out to run here")
    assert not (tmp_path / "s").exists()
