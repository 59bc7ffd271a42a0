"""race-lab check's exit codes past 0, 1 and 2 (docs/check.md), as a gate reads them, and what race_lab.check (the
pytest plugin's API) raises for each: 3, no verdict, when race-lab itself fails (CheckError), and 130 when it is
interrupted (KeyboardInterrupt).

race-lab fails for real here: another process holds the rendezvous port the check's run is given, so the run cannot
launch (train/launch/elastic.py's port check: a harness_error, before any rank starts). Nothing of race-lab's own
is mocked. One scenario keeps both cheap: framework=lightning check.saves=async runs async_top_k alone."""
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import race_lab
from conftest import RACE_LAB, ROOT, processes_tagged, tagged_env
from helpers.interrupts import STOP_WITHIN_S, events_below, went_on_after_the_signal

ONE_RUN = ["check.saves=async", "check.repeats=1"]  # with framework=lightning: async_top_k, once
NO_VERDICT = "error: no verdict for async_top_k: the harness failed there (their runs' logs say why); not a race"


@contextlib.contextmanager
def a_port_held_by_another_process():
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


def test_race_lab_failing_is_exit_3_with_one_line_never_a_race_and_race_lab_check_raises_check_error(
        tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")  # the card's width: its last line whole, however wide the tests' terminal
    with a_port_held_by_another_process() as port:
        taken = f"rdzv.endpoint=127.0.0.1:{port}"
        out = tmp_path / "cli"
        done = subprocess.run([RACE_LAB, "check", "framework=lightning", *ONE_RUN, taken, f"hydra.sweep.dir={out}"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300, env=tagged_env(str(out)))
        api = tmp_path / "api"
        monkeypatch.setenv("RACE_LAB_TEST_TAG", str(api))  # race_lab.check's command inherits this environment
        with pytest.raises(race_lab.CheckError) as raised:
            race_lab.check("lightning", "as_shipped", None, *ONE_RUN, taken, folder=api, timeout_s=300)
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-2] == NO_VERDICT  # the answer, in one line (then where the card is)
    assert lines.count(f"error: rdzv.endpoint=127.0.0.1:{port}: the port is already in use by another process") == 1
    assert done.stderr == "" and "Traceback" not in done.stdout and "unsafe" not in done.stdout
    checked = json.loads((out / "check.json").read_text())
    assert (checked["verdict"], checked["errors"]) == ("error", ["async_top_k"])
    [row] = checked["scenarios"]
    assert (row["verdict"], row["counted"], row["races"], row["not_counted"]) == ("error", 0, 0, 1)  # no race counted
    [summary] = [json.loads(p.read_text()) for p in out.glob("*/summary.json")]
    assert (summary["status"], summary["verdict"]) == ("harness_error", "error")
    message = str(raised.value)
    assert message.startswith("race-lab check exited 3: ") and NO_VERDICT in message.splitlines()
    assert json.loads((api / "check.json").read_text())["verdict"] == "error"
    assert not processes_tagged(str(out)) and not processes_tagged(str(api))


A_TEAMS_SCRIPT = textwrap.dedent("""
    import signal
    import sys

    import race_lab

    # as run from a terminal, however pytest was started (a background job's processes inherit SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        race_lab.check("lightning", "on_durable", None, *sys.argv[2:], folder=sys.argv[1])
    except KeyboardInterrupt as e:
        print(f"KeyboardInterrupt: {e}", flush=True)
        sys.exit(130)
""")


SLOW = 120  # fault.slow_write_s: far longer than the signal can take to come; the Ctrl-C ends it


@pytest.mark.slow
def test_ctrl_c_while_race_lab_check_runs_stops_the_check_as_from_a_shell_and_raises_keyboard_interrupt(tmp_path):
    """A team's script calls race_lab.check; Ctrl-C (SIGINT to its process group, as its terminal sends it) the
    moment rank 0 of the check's one run begins its slow write: with fix=on_durable rank 0 waits for that write
    (async_top_k), made SLOW s long, so the run is certainly under way when the signal lands (with the scenario's
    4 s, the check once ended before it on CI's loaded cores: exit 0). race_lab.check passes it on to the check
    and lets it stop as from a shell, then raises KeyboardInterrupt saying where the runs are: exit 130 at once,
    check.log kept (subprocess.run killed the check 0.25 s after the Ctrl-C: check.log empty), the run's summary
    written, no save or load after the signal, no process left."""
    out = tmp_path / "check"
    proc = subprocess.Popen([sys.executable, "-c", A_TEAMS_SCRIPT, str(out), *ONE_RUN, f"fault.slow_write_s={SLOW}"],
                            cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=tagged_env(str(out)))
    try:
        deadline = time.monotonic() + 240
        while not any(e["event"] == "slow_write_start" for e in events_below(out)):
            assert proc.poll() is None and time.monotonic() < deadline, "the check's run never began its slow write"
            time.sleep(0.05)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        said, _ = proc.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, said[-3000:]
    assert said.strip().splitlines()[-1] == \
        f"KeyboardInterrupt: race-lab check was interrupted: the runs so far are in {out}"
    assert took < STOP_WITHIN_S, f"it took {took:.1f} s to stop"
    assert (out / "check.log").read_text().startswith(f"[sweep] 1 jobs into {out}")
    assert not (out / "check.json").exists()  # no verdict from an interrupted check
    # the run stopped as a single run does and wrote its summary (the Ctrl-C once reached the sweep's idle job
    # workers too, which broke its pool, and the running job was killed before it could)
    assert [json.loads(p.read_text())["status"] for p in out.glob("*/summary.json")] == ["interrupted"]
    assert went_on_after_the_signal(events_below(out)) == []
    assert not processes_tagged(str(out))
    assert "Traceback" not in said
