"""One rank: join the group, then hand over to the run's framework adapter (train/frameworks/),
which trains, saves and loads under test; then wait for every rank and leave.

Runs in a process started by torch elastic, which sets RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT. Every step lands in events/rank<N>.jsonl. The process group is
created here, with timeout.collective_s, for every framework: each one finds it already there and
uses it (the Trainer would otherwise ignore ddp_timeout on CPU, transformers 5.23).
"""
import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

from train.events import EventLog, attempt
from train.faults import Faults
from train.frameworks import entry
from train.toolkit import hang
from train.toolkit.rank import Rank, node_disk, say
from train.torch_private import default_store


def run_rank(cfg: dict, plan: dict, run_dir: str) -> dict:
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    events = EventLog(run_dir, rank)
    events.record("rank_start", pid=os.getpid(), host=socket.gethostname(), node=int(os.environ.get("GROUP_RANK", 0)),
                  launcher_node_rank=cfg["node_rank"], framework=cfg["framework"]["name"], node_disk=node_disk(cfg),
                  device=plan["device"], backend=plan["backend"])

    if plan["device"] == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # ranks share the cores
        torch.set_num_threads(1)
        device = torch.device("cpu")
    timeout = timedelta(seconds=cfg["timeout"]["collective_s"])
    dist.init_process_group(plan["backend"], timeout=timeout, device_id=device if device.type == "cuda" else None,
                            **attempt_store(rank, cfg["world_size"], timeout))

    entry(cfg)(Rank(cfg, plan, run_dir, events, Faults(cfg, events, say), device))

    wait_for_every_rank(cfg["world_size"], cfg["timeout"]["collective_s"] + 10)
    events.record("rank_end")
    dist.destroy_process_group()
    return {"rank": rank, "pid": os.getpid()}


def attempt_store(rank: int, world_size: int, timeout: timedelta) -> dict:
    """After a restart (launch.max_restarts), the process group's store: the agent's, under a prefix of this
    attempt's own. The agent's store outlives the attempts, and env:// reuses its keys as they are (torch 2.14:
    "a new TCPStore for every retry", not so with the agent's): gloo would read the dead attempt's addresses
    and fail to connect, and train/toolkit/hang.py would read the dead ranks' places. The first attempt: env://."""
    restart = attempt()
    if restart == 0:
        return {}
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
    return {"store": dist.PrefixStore(f"race-lab/attempt{restart}", agent), "rank": rank, "world_size": world_size}


def wait_for_every_rank(world_size: int, timeout_s: float):
    """No rank leaves before every rank is done with the checkpoint: a rank that went its own way
    (scenario=disagree) would otherwise close its connections and turn a peer's hang into an error.
    Counted on the rendezvous store, not with a collective, which could pair with a peer's barrier:
    the last rank to count in sets a key that the others wait for. Its place ("end", then "done") is
    published there too: a peer that waits in a sync this rank never entered sees at once that it
    cannot end, counts itself in and ends (train/toolkit/hang.py)."""
    store = default_store()
    try:
        hang.publish("end")
        hang.count_in(store, world_size)
        store.wait([hang.ALL_DONE], timedelta(seconds=timeout_s))
        hang.publish("done")
    except (RuntimeError, dist.DistError):  # a timeout, or the store went with a node that was stopped
        pass
