"""One attempt number for every rank of a restart (train/rank/worker.py agree_on_attempt, train.events.attempt).

torch elastic counts restarts per node: an agent whose workers are healthy but that sees another node waiting
restarts them as a membership change, without counting it, so the two nodes' TORCHELASTIC_RESTART_COUNT of one
restart can read 1 and 0 (configs/scenario/node_local_resume.yaml's two agents on one host did, about 1 run in 3).
Here two real rank processes join a real gloo group over a store hosted by the test, as an agent's is: first both
with count 0, then as that restart hands them out, 1 on rank 0 and 0 on rank 1. Both must say attempt 1, to each
other, in every event, and the group must form (its store's prefix is the attempt's).
"""
import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
import torch.distributed as dist

from conftest import ROOT, tagged_env

ATTEMPTS = r"""
import json, os, sys
from datetime import timedelta
import torch.distributed as dist
from train.events import EventLog, attempt
from train.process import end_with_parent
from train.rank.worker import agree_on_attempt, attempt_store

run_dir, timeout = sys.argv[1], timedelta(seconds=float(sys.argv[2]))


def rank_main(rank):
    agent = agree_on_attempt(rank, timeout)
    EventLog(run_dir, rank).record("rank_start")
    dist.init_process_group("gloo", timeout=timeout, **attempt_store(rank, 2, agent))
    every = [None, None]
    dist.all_gather_object(every, attempt())
    dist.destroy_process_group()
    return {"rank": rank, "attempt": attempt(), "every": every}


for counts in json.loads(sys.argv[3]):  # one attempt after the other, each rank a process forked afresh
    pids = []
    for rank, count in enumerate(counts):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                end_with_parent()  # a test stopped at its timeout takes its ranks along
                os.environ.update(RANK=str(rank), LOCAL_RANK="0", TORCHELASTIC_RESTART_COUNT=str(count))
                line = json.dumps(rank_main(rank)) + "\n"
                os.write(1, line.encode())
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    if any(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids):
        sys.exit("a rank failed")
"""
COLLECTIVE_S = 10.0  # the group forms in well under a second; a mismatched attempt never forms it


def run_attempts(run_dir, port: int, counts: list) -> list:
    """Each attempt's ranks, forked from one process that imported torch once: counts[a][r] is the restart
    count rank r's agent hands it in attempt a. Returns what every rank said, attempt by attempt."""
    env = {**tagged_env(str(run_dir)), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
           "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "test-attempt", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", ATTEMPTS, str(run_dir), str(COLLECTIVE_S), json.dumps(counts)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=(COLLECTIVE_S + 30) * len(counts))
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return [sorted(said[2 * a:2 * a + 2], key=lambda r: r["rank"]) for a in range(len(counts))]


@pytest.fixture
def agent_store():
    """A store hosted here, standing in for the agent's: it outlives the attempts and every node shares it."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    yield store
    del store


def test_ranks_whose_agents_counted_the_restart_differently_agree_on_its_attempt(tmp_path, agent_store):
    from train.events import read_events

    # then node 0's rank is killed: its agent counts a restart; node 1's agent sees node 0 waiting and does not
    first, restart = run_attempts(tmp_path, agent_store.port, [[0, 0], [1, 0]])
    assert [r["every"] for r in first] == [[0, 0], [0, 0]]
    assert [(r["rank"], r["attempt"], r["every"]) for r in restart] == [(0, 1, [1, 1]), (1, 1, [1, 1])]
    starts = [(e["rank"], e["attempt"]) for e in read_events(tmp_path) if e["event"] == "rank_start"]
    assert sorted(starts) == [(0, 0), (0, 1), (1, 0), (1, 1)]  # the event recorded before the group says 1 too


def test_outside_torch_elastic_the_attempt_is_the_agents_count(monkeypatch):
    import train.events as events
    from train.rank.worker import agree_on_attempt

    monkeypatch.setattr(events, "_agreed", None)
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert agree_on_attempt(0, timedelta(seconds=1)) is None
    assert events.attempt() == 2
    events.set_attempt(3)
    assert events.attempt() == 3 and events.elastic_restart_count() == 2
    assert os.environ["TORCHELASTIC_RESTART_COUNT"] == "2"
