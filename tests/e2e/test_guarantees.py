"""Guarantees that no scenario's verdict shows, each checked on its own (issue 24's hand-made mutants, each of
which survived the fast loop before these): only rank 0 touches the file in a broadcast read; a manifest's marker
vouches for those bytes only; a rank that gets a stop signal ends itself at once, not at torch elastic's backstop;
a node agent on one host has a disk of its own. docs/mutants.md lists them with the mutant each kills."""
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT

BROADCAST_RANK = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from datetime import timedelta
    import torch.distributed as dist
    from train.fixes import broadcast_read

    rank, store_file, out = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))

    class Events:
        def record(self, event, **fields):
            pass

    def read():
        (out / f"read-by-rank{rank}").touch()
        return {"weights": "rank 0's"}

    got = broadcast_read(Events(), read)
    (out / f"rank{rank}.json").write_text(json.dumps(got))
    dist.destroy_process_group()
""")


def test_a_broadcast_read_calls_the_read_on_rank_0_alone_and_every_rank_gets_its_object(tmp_path):
    """fixes.broadcast_read on two real gloo ranks: rank 1 never calls read() (it never touches the file)."""
    script = tmp_path / "rank.py"
    script.write_text(BROADCAST_RANK)
    ranks = [subprocess.Popen([sys.executable, str(script), str(r), str(tmp_path / "store"), str(tmp_path)],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}) for r in (0, 1)]
    assert [p.wait(timeout=120) for p in ranks] == [0, 0]
    assert sorted(p.name for p in tmp_path.glob("read-by-*")) == ["read-by-rank0"]
    assert [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)] == [{"weights": "rank 0's"}] * 2


def test_a_manifest_marker_vouches_only_for_the_bytes_it_was_written_for(tmp_path):
    """fixes.is_complete: a file changed after its marker (same size, other bytes) is not complete."""
    from train.fixes import is_complete, write_marker

    path = tmp_path / "epoch1.pt"
    data = b"the checkpoint's bytes"
    path.write_bytes(data)
    write_marker(path, data, step=20)
    assert is_complete(path)
    path.write_bytes(data.replace(b"bytes", b"BYTES"))  # another writer's file under the same name
    assert not is_complete(path)
    path.write_bytes(data)
    (tmp_path / "epoch1.pt.complete").unlink()
    assert not is_complete(path)


STOPPED_RANK = textwrap.dedent("""
    import os, sys, time
    os.environ["RANK"] = "0"
    from train.rank.entry import stop_at_once_on_signal  # imports torch, which may start threads of its own
    pid = os.fork()  # a rank is forked with one thread, as the forkserver forks it
    if pid == 0:
        stop_at_once_on_signal(sys.argv[1])
        print(os.getpid(), flush=True)
        time.sleep(600)  # a rank blocked in a wait: only the stop thread can end it
        os._exit(0)
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
""")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_rank_that_gets_a_stop_signal_records_it_and_ends_itself(tmp_path, stop):
    """train/rank/entry.py: the stop thread records `interrupted` and exits 128+signal itself. Without that exit
    the rank would sleep on (its signals are blocked in every thread) until torch elastic's SIGKILL."""
    rank = subprocess.Popen([sys.executable, "-c", STOPPED_RANK, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.kill(int(rank.stdout.readline()), stop)
    try:
        code = rank.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rank.kill()
        pytest.fail("the rank did not end itself on the stop signal")
    assert code == 128 + stop
    events = [json.loads(line) for line in (tmp_path / "events" / "rank0.jsonl").read_text().splitlines()]
    assert [(e["event"], e["signal"]) for e in events] == [("interrupted", stop.name)]


def _node_agent_sees(cfg, plan, records, out):
    """A node agent's run (the seam node_agent hands it to): what its node's checkpoint.dir is, from inside."""
    from train.launch.nodes import node_agent

    def run_node(node_cfg, plan, records, overrides, echo):
        folder = Path(node_cfg["checkpoint"]["dir"])
        (folder / "epoch0.pt").write_bytes(b"node 0's")
        mounts = Path("/proc/self/mounts").read_text()
        Path(out).write_text(json.dumps({"tmpfs": f" {folder} tmpfs " in mounts,
                                         "files": sorted(p.name for p in folder.iterdir())}))

    node_agent(cfg, plan, records, False, "mount", str(records), run_node)


def test_a_node_agent_on_one_host_writes_to_a_disk_of_its_own(tmp_path):
    """train/launch/nodes.py, launch.node_disks=mount: what a node agent writes to checkpoint.dir is on its own
    tmpfs; the host's folder at that path stays empty."""
    from train.launch.nodes import can_mount_node_disks

    if not can_mount_node_disks():
        why = "this machine gives no mount namespace with a tmpfs (root or user namespaces)"
        if os.environ.get("CI") == "true":  # CI runs as root: there the test must run, not skip
            pytest.fail(why)
        pytest.skip(why)
    folder = tmp_path / "models"
    folder.mkdir()
    cfg = {"checkpoint": {"dir": str(folder)}, "launch": {"start_method": "spawn"}}
    plan = {"device": "cpu", "backend": "gloo", "reason": "test"}
    out = tmp_path / "seen.json"
    agent = multiprocessing.get_context("fork").Process(target=_node_agent_sees,
                                                        args=(cfg, plan, tmp_path / "node0", str(out)))
    agent.start()
    agent.join(timeout=60)
    assert agent.exitcode == 0
    assert json.loads(out.read_text()) == {"tmpfs": True, "files": ["epoch0.pt"]}
    assert list(folder.iterdir()) == []  # the host, like every other node, never sees node 0's file
