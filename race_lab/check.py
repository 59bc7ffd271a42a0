"""`race-lab check` called from Python, as a team's own test calls it:

    import race_lab
    race_lab.check(framework="lightning", fix="own", target="mypkg.io.MyIO")

It runs the command in a process of its own (its ranks, its Hydra run, its Ctrl-C: as from a shell), from the
current folder, so `target` is imported as the command would import it. It returns the result (check.json) when the
check is safe, and raises Unsafe, an AssertionError whose message is the card, when it is not; CheckError when the
input is refused (exit 2) or the harness failed (exit 3), with the command's last lines; KeyboardInterrupt when it was
interrupted (exit 130), saying where the runs so far are.

The command runs in a process group of its own, as a shell runs a job: a Ctrl-C (KeyboardInterrupt here) is passed on
to it once, and it stops its runs as from a shell, keeping their records, before KeyboardInterrupt goes on from here
(subprocess.run would kill it 0.25 s after the Ctrl-C: its check.log lost, runs left without their summary)."""

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

EXIT_SAFE, EXIT_UNSAFE, EXIT_INTERRUPTED = 0, 1, 130  # race-lab check's (2: refused, 3: no verdict)
STOP_S = 60.0  # how long an interrupted check has to stop its runs (it takes under 3 s on 2 loaded cores)


@dataclass(frozen=True)
class CheckResult:
    verdict: str  # safe | unsafe
    card: str  # what the command printed as its card, from check.json
    folder: Path  # the check's folder: check.json, check.md, check.html and each run
    record: dict[str, Any]  # check.json as written


class Unsafe(AssertionError):
    """The check found a race: its message is the card (a scenario a line, the change that holds them)."""

    def __init__(self, result: CheckResult):
        super().__init__(result.card)
        self.result = result


class CheckError(RuntimeError):
    """No verdict: the input was refused before any rank started (exit 2) or the harness failed (exit 3)."""


def check(framework: str, fix: str = "own", target: Optional[str] = None, *overrides: str,
          folder: Optional[os.PathLike] = None, timeout_s: Optional[float] = None) -> CheckResult:
    """race-lab check framework=<framework> fix=<fix> [fix._target_=<target>] [overrides...] into `folder`
    (default: the command's own, runs/check/<time>-<framework>-<fix>/). Key=value overrides as on the command line,
    e.g. "check.repeats=1", "check.restarts=false". timeout_s: the whole check's limit (None: its own timeouts)."""
    from train.report.check_card import card

    argv = [sys.executable, "-m", "train", "check", f"framework={framework}", f"fix={fix}",
            *([f"fix._target_={target}"] if target else []), *overrides,
            *([f"hydra.sweep.dir={Path(folder).resolve()}"] if folder else [])]
    done = _run(argv, timeout_s)
    if done.returncode == EXIT_INTERRUPTED:
        said = [line for line in done.stderr.splitlines() if line.startswith("interrupted: ")]  # where its runs are
        raise KeyboardInterrupt("race-lab check was " + (said[-1] if said else "interrupted"))
    if done.returncode not in (EXIT_SAFE, EXIT_UNSAFE):
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise CheckError(f"race-lab check exited {done.returncode}: {tail}")
    out = check_folder(done.stdout)
    record = json.loads((out / "check.json").read_text())
    result = CheckResult(record["verdict"], card(record), out, record)
    if done.returncode == EXIT_UNSAFE:
        raise Unsafe(result)
    return result


def _run(argv: list, timeout_s: Optional[float]) -> subprocess.CompletedProcess:
    """The command in a process group of its own, its output captured. Whatever ends the wait here (a Ctrl-C's
    KeyboardInterrupt, timeout_s) is passed on to it as one SIGINT to its group, and it has STOP_S to stop as it does
    from a shell (then, or at a second Ctrl-C, its group is killed). A KeyboardInterrupt becomes its exit 130; the
    rest go on from here once it has stopped."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except BaseException as e:
            stdout, stderr = _stop(proc)
            if not isinstance(e, KeyboardInterrupt):
                raise
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def _stop(proc: subprocess.Popen) -> tuple:
    """SIGINT to the command's group, as a terminal's Ctrl-C; its output once it has stopped."""
    _signal_group(proc, signal.SIGINT)
    try:
        return proc.communicate(timeout=STOP_S)
    except BaseException:  # it did not stop within STOP_S, or a second Ctrl-C: nothing of it is left running
        _signal_group(proc, signal.SIGKILL)
        raise


def _signal_group(proc: subprocess.Popen, sig: int):
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:  # it had ended, and all of its group
        pass


def check_folder(stdout: str) -> Path:
    """The folder the command said it wrote into (its `card: <folder>/check.md; ...` line)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("card: ") and "/check.md" in line:
            return Path(line.removeprefix("card: ").split("/check.md")[0])
    raise CheckError(f"race-lab check wrote no card: {stdout.strip().splitlines()[-1:]}")
