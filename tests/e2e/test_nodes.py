"""Several nodes on torch elastic's c10d rendezvous: real agents on loopback, each node's own disk (a tmpfs in
its own mount namespace, or a folder), node run dirs merged into one verdict."""
import json
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, processes_tagged, tagged_env
from train.launch.nodes import free_port

PROBE_THE_RUN_DIR = """
import sys, time
from pathlib import Path
from train.launch.preflight import check_writable
run_dir, me, ready = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
(ready / me).touch()
while len(list(ready.iterdir())) < 2:  # both processes probe over the same second
    time.sleep(0.01)
until = time.monotonic() + 1
while time.monotonic() < until:
    check_writable(run_dir)
"""


def node(run_dir, tag, *overrides):
    """One node's launcher, as a user starts it on each machine."""
    return subprocess.Popen([sys.executable, "-m", "train", f"hydra.run.dir={run_dir}", *overrides], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=tagged_env(tag))


def finish(proc, timeout=300):
    try:
        return proc.communicate(timeout=timeout)[0]
    finally:
        proc.kill()


def outcomes(summary):
    return [r["outcome"] for r in summary["ranks"]]


@pytest.mark.slow
def test_no_shared_fs_on_one_host_barrier_loses_and_broadcast_and_save_on_each_node_hold(train):
    run = train("scenario=no_shared_fs", "fix=barrier", "world_size=2", "launch.node_disks=folder")
    assert run.rc == 0, run.out[-3000:]
    s = run.summary
    assert (s["verdict"], outcomes(s)) == ("race", ["loaded", "missing"])  # node 1's disk has no file
    assert sorted(p.name for p in (run.dir / "nodes").iterdir()) == ["node0", "node1"]
    assert sorted(p.name for p in (run.dir / "events").glob("*.jsonl")) == \
        ["launcher-node0.jsonl", "launcher-node1.jsonl", "launcher.jsonl", "rank0.jsonl", "rank1.jsonl"]
    starts = {e["rank"]: e for e in run.events if e["event"] == "rank_start"}
    assert (starts[0]["node"], starts[1]["node"]) == (0, 1)
    assert s["node_disk"] == "folder"  # the fallback form, asked for: a folder per node
    assert (run.dir / "models/node0/best.pth").exists() and not (run.dir / "models/node1/best.pth").exists()
    assert s["explanation"].startswith("race: rank 1 tried to load (FileNotFoundError): the file is on node 0's own "
                                       "disk; node 1's disk has none")
    assert not processes_tagged(str(run.dir))  # both agents and every rank are gone
    # the console: one header, ranks by their real rank, node 0 before node 1, no stack trace
    assert run.out.count("run dir: ") == 1 and run.out.count("\nfault: ") == 1
    assert "[rank 1] " in run.out and "[default_role" not in run.out
    assert run.out.index("node 0 of 2: ok") < run.out.index("node 1 of 2: ok")
    assert "Traceback" not in run.out + run.err and "Exception raised from" not in run.out + run.err

    for fix in ("broadcast", "save_on_each_node"):  # an override in Hydra's ++ form reaches both nodes too
        run = train("scenario=no_shared_fs", f"fix={fix}", "world_size=2", "expect=clean", "++seed=3")
        assert run.rc == 0, run.out[-3000:]
        assert [json.loads((run.dir / f"nodes/node{k}/node_summary.json").read_text())["config"]["seed"]
                for k in (0, 1)] == [3, 3]
        assert run.summary["replicas"] == "agree"
        assert len({r["final_digest"] for r in run.summary["ranks"]}) == 1
        assert not processes_tagged(str(run.dir))


@pytest.mark.slow
def test_one_host_node_agents_each_have_a_disk_that_no_other_node_and_not_the_host_sees(train):
    """launch.all_nodes_here: each node's agent is a process forked from the run's forkserver, in a mount
    namespace of its own with a tmpfs on checkpoint.dir (node_disks=auto: mount, as root here); its ranks fork
    from it and share its disk. Rank 0 saved on node 0's disk; rank 1, on node 1, past the barrier, finds none."""
    run = train("scenario=no_shared_fs", "fix=barrier", "world_size=2")
    assert run.rc == 0, run.out[-3000:]
    s = run.summary
    assert (s["node_disk"], s["verdict"], outcomes(s)) == ("mount", "race", ["loaded", "missing"])
    saved = [e for e in run.events if e["event"] == "save_end"]
    assert {e["rank"] for e in saved} == {0} and saved[-1]["path"].startswith(str(run.dir / "models"))
    loads = {e["rank"]: e for e in run.events if e["event"] == "load_attempt"}
    assert loads[1]["path"] == saved[-1]["path"]  # the same path as node 0's file, on node 1's own disk
    assert not list((run.dir / "models").iterdir())  # the host's folder under the mounts: nothing was written there
    assert [json.loads((run.dir / f"nodes/node{k}/node_summary.json").read_text())["node_rank"] for k in (0, 1)] \
        == [0, 1]
    assert run.out.count("run dir: ") == 1 and "Traceback" not in run.out + run.err
    assert not processes_tagged(str(run.dir))


@pytest.mark.slow
def test_under_start_method_spawn_the_node_agents_are_spawned_with_their_own_disks_too(train):
    run = train("scenario=no_shared_fs", "fix=barrier", "world_size=2", "launch.start_method=spawn")
    assert run.rc == 0, run.out[-3000:]
    s = run.summary
    assert (s["node_disk"], s["verdict"], outcomes(s)) == ("mount", "race", ["loaded", "missing"])
    assert [n["status"] for n in s["nodes"]] == ["ok", "ok"]
    assert not processes_tagged(str(run.dir))


@pytest.mark.slow
def test_a_nodes_run_whose_launcher_is_killed_leaves_no_process(tmp_path):
    """kill -9 of the launcher (nothing of it runs after): its forkserver goes with it, each node agent with
    the forkserver, each rank with its node agent."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "train", f"hydra.run.dir={run_dir}", "scenario=no_shared_fs",
                             "fix=barrier", "skew.seconds=120"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=tagged_env(str(run_dir)))
    try:
        deadline = time.time() + 240
        while not list(run_dir.glob("nodes/node*/events/rank*.jsonl")) or \
                '"skew_start"' not in "".join(p.read_text() for p in run_dir.glob("nodes/node*/events/rank*.jsonl")):
            assert proc.poll() is None and time.time() < deadline, "rank 0 never got to its stall"
            time.sleep(0.2)
        assert len(processes_tagged(str(run_dir))) >= 5  # launcher, forkserver, 2 node agents, 2 ranks
        proc.kill()
        proc.wait()
        deadline = time.time() + 60  # a bound for a failure, not a timing: each goes at once
        while processes_tagged(str(run_dir)) and time.time() < deadline:
            time.sleep(0.2)
        assert not processes_tagged(str(run_dir))
    finally:
        proc.kill()


def test_the_node_launchers_that_share_a_run_dir_can_both_check_it_is_writable_at_once(tmp_path):
    """launch.all_nodes_here starts every node's launcher into one run dir, at once; a shared probe file name
    once made one of them refuse the run dir (exit 2) when the other removed the probe first."""
    run_dir, ready = tmp_path / "run", tmp_path / "ready"
    run_dir.mkdir()
    ready.mkdir()
    probes = [subprocess.Popen([sys.executable, "-c", PROBE_THE_RUN_DIR, str(run_dir), str(k), str(ready)], cwd=ROOT,
                               stderr=subprocess.PIPE, text=True) for k in range(2)]
    errors = [p.communicate(timeout=120)[1] for p in probes]
    assert [p.returncode for p in probes] == [0, 0], errors
    assert list(run_dir.iterdir()) == []


@pytest.mark.slow
def test_two_nodes_started_by_hand_then_merged_give_the_one_host_verdict(tmp_path, train):
    port, rid = free_port(), f"test-{time.time_ns()}"
    common = ["fix=barrier", "world_size=2", "nnodes=2", f"rdzv.endpoint=127.0.0.1:{port}", f"rdzv.id={rid}",
              "checkpoint.node_local=true", f"checkpoint.dir={tmp_path / 'disks'}", "timeout.collective_s=15"]
    procs = [node(tmp_path / f"vm{k}", str(tmp_path), *common, f"node_rank={k}") for k in range(2)]
    dirs = [tmp_path / f"vm{k}/nodes/node{k}" for k in range(2)]  # each machine's own runs/, copied back
    outs = [finish(p) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[-2000:] for o in outs]
    for k, d in enumerate(dirs):
        n = json.loads((d / "node_summary.json").read_text())
        assert (n["node_rank"], n["status"], n["rdzv"]["id"]) == (k, "ok", rid)
        assert not (d.parent.parent / "summary.json").exists()  # a node alone has no verdict
    assert "python -m train.report --merge" in outs[0]

    merged = tmp_path / "merged"
    proc = subprocess.run([sys.executable, "-m", "train.report", "--merge", *map(str, dirs), "--out", str(merged)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    s = json.loads((merged / "summary.json").read_text())
    one_host = train("scenario=no_shared_fs", "fix=barrier", "world_size=2").summary
    assert (s["verdict"], outcomes(s)) == (one_host["verdict"], outcomes(one_host)) == ("race", ["loaded", "missing"])
    assert [n["node_rank"] for n in s["nodes"]] == [0, 1]
    assert not processes_tagged(str(tmp_path))

    # dirs of different runs are refused with one line
    other = tmp_path / "other"
    other.mkdir()
    (other / "node_summary.json").write_text(json.dumps({**json.loads((dirs[1] / "node_summary.json").read_text()),
                                                         "rdzv": {"id": "another-run", "endpoint": "x:1"}}))
    proc = subprocess.run([sys.executable, "-m", "train.report", "--merge", str(dirs[0]), str(other), "--out",
                           str(tmp_path / "m2")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {other}: rdzv.id='another-run', but {dirs[0]} has '{rid}': these dirs belong to different runs"]
    assert not (tmp_path / "m2").exists()


@pytest.mark.slow
def test_an_interrupted_node_leaves_nothing_and_the_other_ends_by_its_timeout(tmp_path):
    port, rid = free_port(), f"test-{time.time_ns()}"
    common = ["fix=barrier", "world_size=2", "nnodes=2", f"rdzv.endpoint=127.0.0.1:{port}", f"rdzv.id={rid}",
              "checkpoint.node_local=true", f"checkpoint.dir={tmp_path / 'disks'}", "skew.rank=1",
              "skew.seconds=120", "timeout.collective_s=10"]
    procs = [node(tmp_path / f"vm{k}", str(tmp_path), *common, f"node_rank={k}") for k in range(2)]
    dirs = [tmp_path / f"vm{k}/nodes/node{k}" for k in range(2)]
    deadline = time.time() + 180
    while time.time() < deadline:  # rank 0 waits at the barrier, rank 1 sleeps in its skew
        found = {p.name: p for d in dirs for p in (d / "events").glob("rank*.jsonl")}
        if {"rank0.jsonl", "rank1.jsonl"} <= set(found) and '"sync_enter"' in found["rank0.jsonl"].read_text() \
                and '"skew_start"' in found["rank1.jsonl"].read_text():
            break
        time.sleep(0.2)
    else:
        pytest.fail("the ranks never got to the barrier and the skew: " + finish(procs[0], 5)[-2000:])
    late = next(k for k, d in enumerate(dirs) if (d / "events/rank1.jsonl").exists())  # c10d chose its node
    procs[late].send_signal(signal.SIGINT)  # Ctrl-C on the launcher of the node that holds rank 1
    stopped = time.time()
    outs = [finish(p, timeout=120) for p in procs]
    # its barrier breaks, its rank waits for its peers at most collective_s + 10, its agent collective_s
    assert time.time() - stopped < 10 + (10 + 10) + 10 + 30, "the other node did not end by its timeouts"
    assert procs[late].returncode == 130, outs[late][-2000:]
    assert not processes_tagged(str(tmp_path))

    merged = tmp_path / "merged"
    subprocess.run([sys.executable, "-m", "train.report", "--merge", *map(str, dirs), "--out", str(merged)],
                   cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    s = json.loads((merged / "summary.json").read_text())
    assert s["verdict"] == "interrupted"
    assert s["ranks"][0]["outcome"] in ("aborted", "timeout")


def test_a_slurm_sweep_composes_to_one_launcher_per_node_and_the_sbatch_it_would_submit(tmp_path):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from submitit.slurm.slurm import _make_sbatch_string

    import train.config  # noqa: F401  (the schema)

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["hydra/launcher=slurm", "nnodes=2", "world_size=4",
                                                      "hydra.launcher.partition=gpu"], return_hydra_config=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    assert launcher["_target_"] == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    nodes = OmegaConf.select(cfg, "hydra.launcher.nodes")  # ${nnodes}, resolved against the job's config
    assert (nodes, launcher["tasks_per_node"]) == (2, 1)
    sbatch = _make_sbatch_string(command="python -m submitit.core._submit DIR", folder=tmp_path, nodes=nodes,
                                 ntasks_per_node=launcher["tasks_per_node"], cpus_per_task=launcher["cpus_per_task"],
                                 partition=launcher["partition"], time=launcher["timeout_min"])
    assert "#SBATCH --nodes=2" in sbatch and "#SBATCH --ntasks-per-node=1" in sbatch
    assert "#SBATCH --partition=gpu" in sbatch and "export SUBMITIT_EXECUTOR=slurm" in sbatch
    assert "\nsrun " in sbatch  # one task, one launcher, on each node


def test_inside_a_slurm_task_the_launcher_takes_its_node_and_the_rendezvous_from_the_allocation(monkeypatch):
    from helpers.compose import composed
    from train.launch.nodes import from_slurm

    cfg = composed("nnodes=2", "world_size=4")
    assert from_slurm(cfg) is cfg  # not under Slurm: nothing changes
    for key, value in {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "4242", "SLURM_NODEID": "1",
                       "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_NNODES": "2", "SLURM_PROCID": "1",
                       "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "1"}.items():
        monkeypatch.setenv(key, value)
    got = from_slurm(cfg)
    assert (got["node_rank"], got["rdzv"]) == (1, {"endpoint": "gpu07:29500", "id": "slurm-4242"})


def test_the_rendezvous_port_is_free_and_outside_the_range_the_kernel_hands_out():
    """A port the kernel gives any socket on its own (a gloo pair, another run's store) cannot take it between its
    choice and node 0's bind."""
    import socket
    from pathlib import Path

    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    for _ in range(20):
        port = free_port()
        assert not low <= port <= high
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: raises if not
