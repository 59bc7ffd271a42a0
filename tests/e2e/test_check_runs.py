"""race-lab check as a team's CI sees it (issue 41), with real ranks: the progress in a pipe and on a terminal (a
pseudo-terminal), the card the same as check.json's, and a folder that does not pile up (race-lab prune)."""
import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import termios
import time

import pytest

from conftest import RACE_LAB, ROOT, processes_tagged, tagged_env
from train.events import read_events
from train.judge.verdict import judge
from train.report.check_card import HELD, card
from train.report.prune import RECORDS, size
from train.report.run_records import find_runs, read_summary

# framework=torch_loop fix=manifest, one run a scenario: crash_mid_save and pointer_first hold, cleanup and
# resume_disagree race (docs/measured/torch_loop-all-fixes-r1.csv): both kinds of run in one small check
MIXED = ["framework=torch_loop", "fix=manifest", "check.repeats=1"]
MAX_CONSOLE_LINES = 30  # issue 41: a check's console, whatever the number of jobs


def plain_env(tag: str) -> dict:
    env = tagged_env(tag)
    env.pop("COLUMNS", None)  # the card's width is the terminal's, or 120 in a pipe
    return env


def runs_by_verdict(out):
    runs = {run: read_summary(run)["verdict"] for run in find_runs(out)}
    return [r for r, v in runs.items() if v in HELD], [r for r, v in runs.items() if v not in HELD]


@pytest.mark.slow
def test_in_a_pipe_the_check_says_its_progress_each_tenth_and_keeps_what_its_card_needs(tmp_path):
    """No terminal: a line every tenth of the jobs (here each of 4 but the last), no line a job, the card as
    check.json says it, at most 30 lines in all. Then the folder: a run that held keeps its records only, a run that
    raced stays whole, and the judge gives each pruned run its verdict again from what is left."""
    out = tmp_path / "check"
    done = subprocess.run([RACE_LAB, "check", *MIXED, f"hydra.sweep.dir={out}"], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=900, env=plain_env(str(out)))
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert not processes_tagged(str(out))
    checked = json.loads((out / "check.json").read_text())
    lines = done.stdout.splitlines()
    assert len(lines) <= MAX_CONSOLE_LINES, done.stdout
    assert not [line for line in lines if line.startswith("[sweep] job ")]
    progress = [line for line in lines if line.startswith("[check] ")]
    assert [line.split(":")[0] for line in progress] == [f"[check] {k} of 4 jobs ({25 * k}%)" for k in (1, 2, 3)]
    assert all(re.search(r": \d held, \d raced; ~(\d+m)?\d+s left$", line) for line in progress), progress
    shown = card(checked, 120)
    assert shown in done.stdout  # the answer on the console is check.json's
    assert checked["verdict"] == "unsafe" and "Traceback" not in done.stdout + done.stderr

    pruned, whole = runs_by_verdict(out)
    assert pruned and whole, (pruned, whole)  # both kinds ran
    for run in pruned:
        assert {p.name for p in run.iterdir()} <= RECORDS and (run / "events").is_dir(), list(run.iterdir())
        assert {"logs", "timeline.png", "console.log"} <= set(json.loads((run / "pruned.json").read_text()))
        summary = read_summary(run)
        assert judge(read_events(run), summary["config"]["world_size"]).as_dict()["verdict"] == summary["verdict"]
        assert f"{run.name}/timeline.png" not in (out / "matrix.html").read_text()  # the page made again
    for run in whole:
        assert (run / "logs").is_dir() and (run / "timeline.png").exists() and not (run / "pruned.json").exists()
    assert "matrix.html" in (out / "check.html").read_text()


def on_a_terminal(argv: list, cwd, env, timeout_s: float) -> tuple:
    """Run argv with a pseudo-terminal of 120 x 40 as its stdout and stderr: (exit code, what it showed)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(argv, cwd=cwd, env={**env, "TERM": "xterm-256color"}, stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower)
    os.close(follower)
    shown, deadline = b"", time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # every holder of the terminal's other end has closed it
                break
            if not chunk:
                break
            shown += chunk
        return proc.wait(timeout=max(1, deadline - time.monotonic())), shown.decode("utf-8", "replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)


@pytest.mark.slow
def test_on_a_terminal_the_check_draws_one_bar_and_keep_runs_keeps_them_all_until_race_lab_prune(tmp_path):
    """A pseudo-terminal: rich's bar, redrawn in place, and no plain progress lines. check.keep_runs=true keeps every
    run whole; `race-lab prune --dry-run` says what it would take and takes nothing; `race-lab prune` takes it."""
    out = tmp_path / "check"
    code, shown = on_a_terminal([RACE_LAB, "check", *MIXED, "check.keep_runs=true", f"hydra.sweep.dir={out}"], ROOT,
                                plain_env(str(out)), 900)
    assert code == 1, shown[-3000:]
    assert "━" in shown and "4/4" in shown and "\x1b[" in shown, shown[-3000:]
    assert "[check] 1 of 4 jobs" not in shown and "[sweep] job " not in shown
    assert "unsafe: raced in " in shown
    pruned, whole = runs_by_verdict(out)
    assert pruned and whole and all((run / "logs").is_dir() for run in pruned)

    before = size(out)
    dry = subprocess.run([RACE_LAB, "prune", str(out), "--dry-run"], check=False, cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(f"{out}: would prune {len(pruned)} run(s) that held: {before[0] / 1e6:.1f} MB in "
                                 f"{before[1]} files -> "), dry.stdout
    assert size(out) == before and all((run / "logs").is_dir() for run in pruned)
    done = subprocess.run([RACE_LAB, "prune", str(out)], check=False, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    after = size(out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (f"{out}: pruned {len(pruned)} run(s) that held: {before[0] / 1e6:.1f} MB in "
                                   f"{before[1]} files -> {after[0] / 1e6:.1f} MB in {after[1]} files")
    assert after[1] < before[1] and after[0] < before[0]
    assert not any((run / "logs").exists() for run in pruned) and all((run / "logs").is_dir() for run in whole)
    again = subprocess.run([RACE_LAB, "prune", str(out)], check=False, cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert f"{out}: pruned 0 run(s) that held" in again.stdout  # nothing left to take
