"""Several nodes: the node's own config (Slurm's, or the command line's), and one host standing in for several.

A run over nnodes machines is one `python -m train nnodes=N node_rank=K rdzv.endpoint=HOST:PORT
rdzv.id=ID` per machine; torch elastic's c10d rendezvous joins their agents into one world. Each
node's run dir holds its own ranks' events and logs and node_summary.json, but no verdict: a node
sees only its ranks. `python -m train.report --merge DIR...` (or, on one host,
launch.all_nodes_here=true) puts the nodes' records together and judges them (train/report/node_records.py).

On one host (launch.all_nodes_here=true) the run's launcher does not start a fresh `python -m train` per
node: each node's agent is a process forked from the run's forkserver, which has imported torch and the
framework once (or spawned, under launch.start_method=spawn). It first takes a disk of its own (a mount
namespace with a tmpfs on checkpoint.dir: unshare(2) and mount(2)), then runs torch elastic's agent as
a node's launcher does, and its ranks fork from it, inside that namespace.
"""
import copy
import ctypes
import functools
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

from train.config import ConfigError
from train.launch.forkserver import ensure_forkserver, framework_modules
from train.launch.held_signal import held
from train.report.node_records import (
    MERGED_INTO,
    NODE_SUMMARY,
    node_dir,
    write_node_summary,
)

SLURM_PORT = 29500


def from_slurm(cfg: dict) -> dict:
    """Inside a Slurm job of hydra/launcher=slurm (one task per node): this task's node_rank, and the
    rendezvous at the allocation's first host, with the job id as the rendezvous id."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm" or cfg["nnodes"] == 1:
        return cfg
    import submitit

    job = submitit.JobEnvironment()
    return {**cfg, "node_rank": job.node, "rdzv": {"endpoint": f"{job.hostnames[0]}:{SLURM_PORT}",
                                                   "id": f"slurm-{job.job_id}"}}


def one_of_many(cfg: dict) -> bool:
    """This launcher is one node of several (the others elsewhere, or its siblings under all_nodes_here)."""
    return cfg["nnodes"] > 1 and not cfg["launch"]["all_nodes_here"]


EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")  # where the kernel hands out ports nobody asked for


def free_port(start: int = 10000, end: int | None = None) -> int:
    """A free loopback port for the node agents' rendezvous store, below the kernel's ephemeral range: it is free
    now and bound a moment later by node 0's agent, and a port in that range could be taken in between by any
    socket given one automatically (a gloo pair, another run's store), as under CI's load (2026-12-02).
    start, end: a narrower range (a Ray head's GCS port, below Ray's own worker ports)."""
    import random

    low = int(EPHEMERAL.read_text().split()[0]) if EPHEMERAL.exists() else 0
    low = low if end is None else min(end, low)
    for port in random.sample(range(start, low), min(50, max(low - start, 0))):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NODE_DISK = "RACE_LAB_NODE_DISK"  # mount | folder: how the node agents of launch.all_nodes_here keep disks apart


@functools.lru_cache(maxsize=None)
def can_mount_node_disks() -> bool:
    """Whether a process here may have a mount namespace of its own with a tmpfs in it (root, or user
    namespaces): tried once per process, for real, with util-linux's unshare."""
    if not shutil.which("unshare"):
        return False
    probe = ["unshare", "--mount", "--propagation", "private", "sh", "-c", "mount -t tmpfs probe /mnt"]
    if os.geteuid() != 0:
        probe[1:1] = ["--user", "--map-root-user"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def node_disk_form(cfg: dict) -> str:
    """mount | folder | none: how one host's node agents get disks of their own (launch.node_disks).
    Raises ConfigError when mount is asked for and this machine cannot give it."""
    if not (cfg["checkpoint"]["node_local"] and cfg["nnodes"] > 1 and cfg["launch"]["all_nodes_here"]):
        return "none"
    asked = cfg["launch"]["node_disks"]
    if asked == "folder":
        return "folder"
    if can_mount_node_disks():
        return "mount"
    if asked == "mount":
        raise ConfigError("launch.node_disks=mount: this machine gives no mount namespace with a tmpfs "
                          "(needs root or user namespaces, and unshare); launch.node_disks=folder works anywhere")
    return "folder"


CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000  # linux/sched.h
MS_REC, MS_PRIVATE = 0x4000, 0x40000  # linux/mount.h


def on_its_own_disk(folder: str):
    """Put this process in a mount namespace of its own where `folder` is a fresh tmpfs: its node's own disk,
    which no other node sees, at the same path as theirs (what `unshare --mount --propagation private` and
    `mount -t tmpfs` do, as system calls). Not root: in a user namespace of its own too, as root there.
    Call it while the process has one thread (the kernel refuses otherwise); its children inherit the disk."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.geteuid(), os.getegid()

    def check(returned, what):
        if returned != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"{what}: {os.strerror(code)}")

    check(libc.unshare(CLONE_NEWNS | (0 if uid == 0 else CLONE_NEWUSER)), "unshare")
    if uid != 0:  # root inside, this user outside (unshare --map-root-user)
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    os.makedirs(folder, exist_ok=True)
    check(libc.mount(b"race-lab-node-disk", folder.encode(), b"tmpfs", 0, None), f"mount tmpfs on {folder}")


_forked_agent = False  # set in a node agent forked from the warm forkserver: its ranks fork from it in turn


def rank_start_method(cfg: dict) -> str:
    """How the agent starts its ranks: launch.start_method, except in a node agent that the forkserver forked,
    which has the framework imported already and is in its node's mount namespace: its ranks fork from it."""
    return "fork" if _forked_agent else cfg["launch"]["start_method"]


def node_config(cfg: dict, node_rank: int, endpoint: str) -> dict:
    """The run's config as node node_rank's own launcher would have it: one node of several, on the rendezvous."""
    node = copy.deepcopy(cfg)
    node.update(node_rank=node_rank, rdzv={"endpoint": endpoint, "id": cfg["rdzv"]["id"]})
    node["launch"]["all_nodes_here"] = False
    return node


def node_agent(cfg: dict, plan: dict, records: str, echo: bool, disk: str, merged_into: str, run_node):
    """One node of launch.all_nodes_here, in a process of its own (forked from the run's warm forkserver, or
    spawned): its own disk first, while it has one thread, then torch elastic's agent for its ranks, as the
    launcher of a node started by hand runs it (run_node: train.launch.experiment.run_experiment, handed down
    by its caller). Its records go to `records` (nodes/node<K>)."""
    global _forked_agent
    from train.process import end_with_parent

    end_with_parent()  # the forkserver's child: it goes when the run's launcher goes, even on SIGKILL
    os.environ.update({MERGED_INTO: merged_into, NODE_DISK: disk})  # its ranks read NODE_DISK too
    if disk == "mount":
        on_its_own_disk(cfg["checkpoint"]["dir"])
    _forked_agent = cfg["launch"]["start_method"] == "forkserver"
    from train.launch.plan import Plan

    (Path(records) / "events").mkdir(parents=True)  # the node's own records, as its launcher's claim makes them
    run_node(cfg, Plan(**plan), Path(records), [], echo)


def run_nodes_here(cfg: dict, plan: dict, run_dir: Path, events, run_node, disk: str = "none",
                   echo: bool = True) -> list:
    """Start one agent per node on this host, on loopback, each recording into run_dir/nodes/node<K>, and wait.
    Returns their run dirs. SIGINT or SIGTERM here is recorded in events and reaches every node's agent.
    Each agent is a process of its own, forked from the run's forkserver (which has imported torch and the
    framework once: no cold start), or spawned under launch.start_method=spawn.
    disk=mount: each agent in its own mount namespace, with its own tmpfs on checkpoint.dir. run_node: what
    each agent runs (a top-level function, so a spawned agent imports it by name)."""
    endpoint = f"127.0.0.1:{free_port()}"
    dirs = [node_dir(run_dir, k) for k in range(cfg["nnodes"])]
    method = cfg["launch"]["start_method"]
    if method == "forkserver":
        ensure_forkserver(framework_modules(cfg["framework"]["name"]), nodes_here=True)
    context = multiprocessing.get_context(method)
    agents = [context.Process(target=node_agent, name=f"node{k}", args=(
        node_config(cfg, k, endpoint), plan, str(d), echo, disk, str(run_dir), run_node)) for k, d in enumerate(dirs)]
    for agent in agents:
        agent.start()

    signalled = []

    def forward(signum, frame):
        if not signalled:  # the first signal is what stopped the run
            signalled.append(events.record("signal", name=signal.Signals(signum).name))
        for agent in agents:
            if agent.exitcode is None:
                agent.terminate()  # SIGTERM: the agent stops its ranks and records it

    before = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    while held:  # a sweep's worker took it before the agents started
        forward(held.pop(), None)
    try:
        for agent in agents:
            agent.join()
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    for k, (d, agent) in enumerate(zip(dirs, agents)):
        if not (d / NODE_SUMMARY).exists():  # that node's agent died before it could say so
            d.mkdir(parents=True, exist_ok=True)
            write_node_summary(d, node_config(cfg, k, endpoint), "harness_error", {"exit_code": agent.exitcode})
    return dirs
