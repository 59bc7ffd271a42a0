"""The harness under faults: whatever dies, every case ends within its timeout plus 10 s, leaves no
process (launcher, forkserver, ranks), keeps every rank's events, and writes a summary.json that names
the fault. And loads run no foreign code: a crafted pickle is refused, not run."""
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT, alive, processes_tagged, tagged_env

pytestmark = pytest.mark.slow


class Launch:
    """python -m train in the background, with a way to wait for a rank's event."""

    def __init__(self, run_dir: Path, *overrides):
        self.dir = run_dir
        self.proc = subprocess.Popen([sys.executable, "-m", "train", f"hydra.run.dir={run_dir}", *overrides],
                                     cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=tagged_env(str(run_dir)))

    def events(self, rank) -> list:
        path = self.dir / "events" / f"rank{rank}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]

    def wait_for(self, rank, event, timeout=180, **fields) -> dict:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for e in self.events(rank):
                if e["event"] == event and all(e.get(k) == v for k, v in fields.items()):
                    return e
            assert self.proc.poll() is None, self.proc.communicate()[0][-3000:]
            time.sleep(0.1)
        raise AssertionError(f"rank {rank} never reached {event}")

    def finish(self, timeout) -> tuple:
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        finally:
            self.proc.kill()
        return self.proc.returncode, out

    @property
    def summary(self) -> dict:
        return json.loads((self.dir / "summary.json").read_text())

    def assert_nothing_left_and_events_kept(self, ranks=2):
        pids = [e["pid"] for r in range(ranks) for e in self.events(r) if e["event"] == "rank_start"]
        assert len(pids) == ranks and not alive(pids)
        assert not processes_tagged(str(self.dir))
        for r in range(ranks):
            assert [e["event"] for e in self.events(r)][:2] == ["rank_start", "fit_start"]


def kill_rank(launch, rank):
    pid = launch.wait_for(rank, "rank_start")["pid"]
    os.kill(pid, signal.SIGKILL)
    return time.time()


def test_kill_9_of_the_writer_during_its_save(tmp_path):
    run = Launch(tmp_path / "run", "scenario=torn", "fix=barrier", "world_size=2", "skew.mid_write_s=60",
                 "timeout.collective_s=20")
    run.wait_for(0, "skew_start", at="mid_write")  # rank 0 is halfway through writing the checkpoint
    killed = kill_rank(run, 0)
    rc, out = run.finish(timeout=20 + 10 + 30)
    assert time.time() - killed < 20 + 10, "the run did not end within its timeout plus 10 s"
    assert rc == 3, out[-3000:]
    s = run.summary
    assert (s["status"], s["verdict"]) == ("failed", "error")
    assert s["ranks"][0]["outcome"] == "error" and s["ranks"][0]["detail"] == "killed by SIGKILL"
    assert s["explanation"].startswith("error: rank 0 failed (killed by SIGKILL")
    assert s["ranks"][1]["outcome"] == "aborted"
    run.assert_nothing_left_and_events_kept()


def test_kill_9_of_a_reader_during_its_load(tmp_path):
    run = Launch(tmp_path / "run", "scenario=torn", "fix=unsynced", "world_size=2", "fault.read_delay_s=60",
                 "timeout.collective_s=20")
    run.wait_for(1, "read_delay_start")  # rank 1 has begun its load and pauses in it
    killed = kill_rank(run, 1)
    rc, out = run.finish(timeout=20 + 10 + 30)
    assert time.time() - killed < 20 + 10
    assert rc == 3, out[-3000:]
    s = run.summary
    assert s["verdict"] == "error" and s["ranks"][1]["detail"] == "killed by SIGKILL"
    assert "rank 1 failed (killed by SIGKILL" in s["explanation"]
    run.assert_nothing_left_and_events_kept()


def test_sigterm_to_the_launcher_stops_every_rank_and_names_the_signal(tmp_path):
    run = Launch(tmp_path / "run", "fix=barrier", "world_size=2", "skew.seconds=120")
    run.wait_for(0, "skew_start")
    run.wait_for(1, "sync_enter")
    run.proc.send_signal(signal.SIGTERM)  # docker stop, Kubernetes and Slurm pre-emption send this
    stopped = time.time()
    rc, out = run.finish(timeout=60)
    assert time.time() - stopped < 10 + 60
    assert rc == 130, out[-3000:]
    s = run.summary
    assert (s["status"], s["verdict"]) == ("interrupted", "interrupted")
    assert s["explanation"] == "interrupted: the run was stopped by SIGTERM before it ended; no verdict"
    assert "Traceback" not in out
    run.assert_nothing_left_and_events_kept()


def test_a_launcher_killed_with_sigkill_takes_its_forkserver_and_ranks_along(tmp_path):
    """kill -9 or the OOM killer: no handler runs, yet nothing of the run may run on (before, the ranks
    would have stalled out their 120 s skew and waited at their barrier)."""
    run = Launch(tmp_path / "run", "fix=barrier", "world_size=2", "skew.seconds=120")
    run.wait_for(0, "skew_start")
    run.wait_for(1, "sync_enter")
    assert len(processes_tagged(str(run.dir))) >= 4  # launcher, forkserver, two ranks
    run.proc.kill()
    run.proc.wait()
    deadline = time.time() + 10
    while processes_tagged(str(run.dir)) and time.time() < deadline:
        time.sleep(0.1)
    assert not processes_tagged(str(run.dir))
    assert [e["event"] for e in run.events(0)][-1] == "skew_start"  # what each rank recorded is still there
    assert [e["event"] for e in run.events(1)][-1] == "sync_enter"


def test_a_stop_while_the_ranks_are_starting_ends_quietly(tmp_path):
    run = Launch(tmp_path / "run", "world_size=2")
    deadline = time.time() + 120
    while not (run.dir / "events/launcher.jsonl").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the forkserver is still importing fastai; the ranks' start-up is queued in it
    run.proc.send_signal(signal.SIGTERM)
    rc, out = run.finish(timeout=60)
    assert rc == 130, out[-3000:]
    assert run.summary["verdict"] == "interrupted"
    assert "Traceback" not in out, out[-3000:]
    assert not processes_tagged(str(run.dir))


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    path.mkdir(parents=True)
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                          text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.strip() or made.returncode}); needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount_read_only(path: Path):
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True, capture_output=True)


def test_a_checkpoint_folder_that_fills_up_during_the_save(tmp_path):
    with tmpfs(tmp_path / "small", "8k") as small:  # the checkpoint is about 16 kB: the disk fills midway
        run = Launch(tmp_path / "run", "fix=barrier", "world_size=2", "epochs=1", "skew.seconds=0",
                     f"checkpoint.dir={small}", "timeout.collective_s=20")
        rc, out = run.finish(timeout=20 + 10 + 60)
    assert rc == 0, out[-3000:]
    s = run.summary
    assert s["verdict"] == "race"
    assert s["explanation"].startswith("race: rank 0's save failed (OSError: [Errno 28] No space left on device)")
    run.assert_nothing_left_and_events_kept()


def crafted_pickle(path: Path, marker: Path):
    """A checkpoint that creates `marker` when unpickled without weights_only."""
    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)
    torch.save({"weight": Payload()}, path)


def test_the_crafted_pickle_would_run_code_if_loaded_unsafely(tmp_path):
    marker = tmp_path / "ran"
    crafted_pickle(tmp_path / "evil.pth", marker)
    subprocess.run([sys.executable, "-c", f"import torch; torch.load({str(tmp_path / 'evil.pth')!r}, "
                                          "weights_only=False)"], capture_output=True, timeout=120)
    assert marker.exists(), "the crafted pickle must be a real threat for the safety tests to mean anything"


def test_a_crafted_checkpoint_is_refused_not_run_by_fastais_load_model(tmp_path):
    marker, models = tmp_path / "ran", tmp_path / "models"
    models.mkdir()
    crafted_pickle(models / "best.pth", marker)  # left where rank 1 reads before rank 0 writes
    run = Launch(tmp_path / "run", "fix=unsynced", "world_size=2", "checkpoint.keep_existing=true",
                 f"checkpoint.dir={models}")
    rc, out = run.finish(timeout=300)
    assert rc == 0, out[-3000:]
    assert not marker.exists(), "a load ran the checkpoint's code"
    s = run.summary
    assert [r["outcome"] for r in s["ranks"]] == ["loaded", "unsafe"]
    assert "rank 1 refused a checkpoint that holds code (weights_only=True)" in s["explanation"]


def test_a_read_only_checkpoint_folder_and_a_crafted_file_through_learner_load_and_broadcast(tmp_path):
    marker = tmp_path / "ran"
    with tmpfs(tmp_path / "ro", "1m") as ro:
        crafted_pickle(ro / "best.pth", marker)
        remount_read_only(ro)  # rank 0's save fails; every rank then reads the crafted file
        for fix in ("barrier", "broadcast"):
            run = Launch(tmp_path / fix, f"fix={fix}", "world_size=2", "epochs=1", "skew.seconds=0",
                         "checkpoint.keep_existing=true", f"checkpoint.dir={ro}", "timeout.collective_s=20")
            rc, out = run.finish(timeout=300)
            assert rc == 0, out[-3000:]
            s = run.summary
            assert s["explanation"].startswith("race: rank 0's save failed (OSError: [Errno 30] Read-only file "
                                               "system"), s["explanation"]
            assert [r["outcome"] for r in s["ranks"]] == ["unsafe", "unsafe"], (fix, s["ranks"])
            run.assert_nothing_left_and_events_kept()
    assert not marker.exists(), "a load ran the checkpoint's code"


def test_a_rendezvous_port_taken_by_another_process(tmp_path):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        run = Launch(tmp_path / "run", "world_size=2", f"rdzv.endpoint=127.0.0.1:{port}", "timeout.collective_s=10")
        rc, out = run.finish(timeout=10 + 10 + 60)
    assert rc == 3, out[-3000:]
    s = run.summary
    assert (s["status"], s["verdict"]) == ("harness_error", "error")
    assert s["explanation"] == (f"error: the launch failed (OSError: rdzv.endpoint=127.0.0.1:{port}: the port is "
                                "already in use by another process)")
    assert not processes_tagged(str(run.dir))


def test_two_launches_into_one_run_dir_at_once_one_wins_one_is_refused(tmp_path):
    both = [Launch(tmp_path / "run", "world_size=2", "epochs=1", "skew.seconds=0") for _ in range(2)]
    results = [b.finish(timeout=300) for b in both]
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 2], [out[-2000:] for _, out in results]
    loser = next(out for rc, out in results if rc == 2)
    assert loser.strip().splitlines()[-1] == \
        f"error: hydra.run.dir={tmp_path / 'run'}: already holds a run; give each run its own dir"
    assert json.loads((tmp_path / "run/summary.json").read_text())["verdict"] in ("race", "clean")
    assert not processes_tagged(str(tmp_path / "run"))
