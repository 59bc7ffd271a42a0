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

from train.events import LAUNCHER, EventLog, attempt, elastic_restart_count, set_attempt
from train.faults import Faults
from train.frameworks.registry import get as framework_named
from train.process import end_own_session, lead_own_session
from train.toolkit import hang
from train.rank.observe import FileWatch, code_roots
from train.toolkit.rank import Rank, checkpoint_dir, node_disk, say
from train.torch_private import default_store


def run_rank(cfg: dict, plan: dict, run_dir: str) -> dict:
    if framework_named(cfg["framework"]["name"]).own_workers:
        return run_driver(cfg, plan, run_dir)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    timeout = timedelta(seconds=cfg["timeout"]["collective_s"])
    agent = agree_on_attempt(rank, timeout)  # before the first event: each one carries the attempt
    events = EventLog(run_dir, rank)
    events.record("rank_start", pid=os.getpid(), host=socket.gethostname(), node=int(os.environ.get("GROUP_RANK", 0)),
                  launcher_node_rank=cfg["node_rank"], framework=cfg["framework"]["name"], node_disk=node_disk(cfg),
                  device=plan["device"], backend=plan["backend"], elastic_restart_count=elastic_restart_count())

    if plan["device"] == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # ranks share the cores
        torch.set_num_threads(1)
        device = torch.device("cpu")
    dist.init_process_group(plan["backend"], timeout=timeout, device_id=device if device.type == "cuda" else None,
                            **attempt_store(rank, cfg["world_size"], agent))

    watch = FileWatch(events, [checkpoint_dir(cfg)], code_roots(cfg["fix"]["_target_"] if cfg["fix"]["name"] ==
                                                                "own" else None))
    watch.install()  # what any code of this rank does to checkpoint files (train/rank/observe.py)
    framework = framework_named(cfg["framework"]["name"])()
    try:
        framework.run(cfg["workload"], Rank(cfg, plan, run_dir, events, Faults(cfg, events, say), device))
    except Exception as error:
        watch.record_raised(error)  # whose code raised it: yours (a verdict) or race-lab's (no verdict)
        raise
    finally:
        watch.record_end()

    wait_for_every_rank(cfg["world_size"], cfg["timeout"]["collective_s"] + 10)
    events.record("rank_end")
    dist.destroy_process_group()
    return {"rank": rank, "pid": os.getpid()}


def run_driver(cfg: dict, plan: dict, run_dir: str) -> dict:
    """The one process a framework that starts its own workers runs in (the contract's own_workers): no process
    group here; the workload starts the framework's workers, each of which records its events as a rank. The
    driver's own log (events/driver.jsonl) holds nothing the judge reads."""
    lead_own_session()  # what the framework starts ends with the driver, a stopped one too (end_own_session)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for name in [n for n in os.environ if n.startswith("TORCHELASTIC_")]:  # the framework's workers are no elastic
        del os.environ[name]  # ranks: with TORCHELASTIC_USE_AGENT_STORE their env:// would wait for an agent's store
    events = EventLog(run_dir, LAUNCHER, name="driver")
    try:
        framework_named(cfg["framework"]["name"])().run(
            cfg["workload"], Rank(cfg, plan, run_dir, events, Faults(cfg, events, say), torch.device("cpu")))
    finally:
        events.close()
        end_own_session()
    return {"rank": int(os.environ["RANK"]), "pid": os.getpid()}


def agree_on_attempt(rank: int, timeout: timedelta):
    """Sets this rank's attempt (train.events.attempt) to the number every rank of this restart holds; returns the
    agent's store it counted on (None outside torch elastic's shared store: the agent's own count stands).

    torch elastic (2.14) counts restarts per agent, one per node: an agent whose own workers failed takes one
    from its remaining restarts and hands its workers TORCHELASTIC_RESTART_COUNT one higher; an agent whose
    workers are healthy but sees another node waiting in the rendezvous restarts its workers too, but as a
    membership change, which "do not count as retries" (SimpleElasticAgent._invoke_run: num_nodes_waiting > 0,
    then _restart_workers with _remaining_restarts as it was). Whichever an agent sees first depends on timing:
    node 0's rank killed, node 1's rank may fail on the broken collective (counted) or be restarted for the
    waiting node (not counted), so the nodes' ranks of one restart can hold 1 and 0. Every restart, counted or
    not, starts every rank again in a new rendezvous round, so each rank counts its own starts on the agent's
    store, which outlives the attempts and is shared by every node: its start number minus one is the same on
    every rank of a restart. The attempt is the max of that and the agent's own count: equal where the agent
    counted every restart, the start count where it did not (the number the other node's ranks hold). Its limit:
    a rank stopped before it counts itself (here, its first moments) would count one start fewer from then on."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != str(True):
        return None
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timeout)
    starts = agent.add(f"race-lab/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/starts/rank{rank}", 1)
    set_attempt(max(elastic_restart_count(), starts - 1))
    return agent


def attempt_store(rank: int, world_size: int, agent) -> dict:
    """After a restart (launch.max_restarts), the process group's store: the agent's, under a prefix of this
    attempt's own (the attempt every rank agreed on: agree_on_attempt). The agent's store outlives the attempts,
    and env:// reuses its keys as they are (torch 2.14: "a new TCPStore for every retry", not so with the
    agent's): gloo would read the dead attempt's addresses and fail to connect, and train/toolkit/hang.py would
    read the dead ranks' places. The first attempt, or no agent's store: env://."""
    restart = attempt()
    if restart == 0 or agent is None:
        return {}
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
