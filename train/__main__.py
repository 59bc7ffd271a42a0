"""`python -m train` and `race-lab`: the Hydra app, with Hydra's own config errors turned into one line and exit 2."""
import atexit
import os
import re
import signal
import sys

RENAMED = {"callback": "fix"}  # an old name of a key or group -> its name now; the old one still works


def with_keys_renamed(argv: list) -> list:
    """The command line with each key's old name (`callback=barrier`, `callback._target_=...`, `+callback.x=`,
    `~callback`) written as its name now (`fix=...`), so that what users already type keeps working."""
    pattern = re.compile(r"^([+~]{0,2})(" + "|".join(map(re.escape, RENAMED)) + r")(?=[.=]|$)")
    return [pattern.sub(lambda m: m[1] + RENAMED[m[2]], arg) for arg in argv]


def exit_without_teardown(code):
    """Leave as sys.exit(code) would, less the interpreter's teardown of torch and Hydra (about 0.7 s):
    the atexit handlers run (the forkserver's stop, logging's flush) and the streams are flushed."""
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    if code == 130:  # interrupted: nothing it started outlives it
        from train.process import end_descendants

        end_descendants()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to flush into
            pass
    os._exit(code)


def cli():
    """The command line: `python -m train` and the `race-lab` command (pyproject.toml) both call this.
    It never returns: it exits through exit_without_teardown."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started with SIGINT ignored (a shell's `race-lab ... &` without job control): a SIGINT to the process group
        # still stops the run, and the forkserver and ranks started from here inherit a SIGINT they can take
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        run_cli()
    except KeyboardInterrupt:  # before the launcher's own handlers are in place (or after): an interrupt, not a trace
        print("interrupted: stopped by SIGINT", file=sys.stderr)
        exit_without_teardown(130)


def import_torch_stopping_at_sigint():
    """import torch (and numpy, which its C init imports); a Ctrl-C during it (about 2 s here, more on a loaded
    machine) ends the process from the handler at once, exit 130: nothing but the forkserver has started, which the
    exit stops. A KeyboardInterrupt raised inside the import was dropped by torch's C init (its numpy import: the
    run went on to its verdict, exit 0) or aborted the process from a C++ callback (pybind11: SIGABRT, exit -6);
    the handler raises none, and os._exit leaves the half-imported torch untouched."""
    def stop(signum, frame):
        print("interrupted: stopped by SIGINT", file=sys.stderr)
        exit_without_teardown(130)

    previous = signal.signal(signal.SIGINT, stop)
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    finally:
        signal.signal(signal.SIGINT, previous)


def run_cli():
    """race-lab check, race-lab prune, or one Hydra run or sweep of python -m train."""
    user_wants_traceback = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"  # let composition errors reach us instead of Hydra's printout
    from train.launch.defaults import with_defaults_filled

    if sys.argv[1:2] == ["check"]:  # race-lab check: a sweep of its own, judged as a whole (train/launch/check.py)
        from train.launch.check import main as check

        exit_without_teardown(check(with_keys_renamed(sys.argv[2:])))
    if sys.argv[1:2] == ["prune"]:  # race-lab prune: runs that held keep only their records (train/report/prune.py)
        from train.report.prune import main as prune

        exit_without_teardown(prune(sys.argv[2:]))
    sys.argv[1:] = with_defaults_filled(with_keys_renamed(sys.argv[1:]))  # Hydra reads sys.argv
    from train.launch.forkserver import start_forkserver

    start_forkserver(sys.argv[1:])  # its preload overlaps the launcher's own start-up (torch, Hydra)
    import_torch_stopping_at_sigint()
    from train.launch.preflight import EXIT_BAD_CONFIG, started
    from train.launch.job import main
    from train.launch.hydra_errors import config_error_line

    try:
        main()
    except SystemExit as e:
        exit_without_teardown(e.code)
    except Exception as e:
        from train.launch.sweep import stopped_by

        if stopped_by:  # a side-by-side sweep's launcher that broke on the interrupt (a worker it reached mid-start)
            print(f"interrupted: stopped by {stopped_by[0]}", file=sys.stderr)
            exit_without_teardown(130)
        line = None if user_wants_traceback or started() else config_error_line(e)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        exit_without_teardown(EXIT_BAD_CONFIG)
    exit_without_teardown(0)


if __name__ == "__main__":  # spawned ranks re-import this module; only the user's process launches
    cli()
