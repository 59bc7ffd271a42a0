"""Each rank's entry point. It lives apart from the launcher so that a rank the forkserver forks,
which unpickles this function by name, imports only this small module (the preload has it already),
not train.launch.job with Hydra; and the launcher, which names it, never imports fastai."""
import os
import signal
import sys
import threading

from torch.distributed.elastic.multiprocessing.errors import record

from train.process import end_own_session, end_with_parent

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@record
def rank_main(cfg: dict, plan: dict, run_dir: str) -> dict:
    """One rank, from torch elastic's start to its return value (a top-level function, so spawn can import it)."""
    end_with_parent()
    stop_at_once_on_signal(run_dir)
    import_from_the_folder_run_from()
    from train.rank.worker import run_rank

    return run_rank(cfg, plan, run_dir)


def import_from_the_folder_run_from():
    """A rank imports what the class check imported (train/launch/own_class.py, a `python -c` run in the same
    folder): the folder the command ran from first, then PYTHONPATH. The forkserver (or spawn) hands a rank the
    launcher's sys.path, which the race-lab command's script starts with its own folder (the venv's bin), not
    the folder it ran from: a class of yours there imported in the check, then not in the ranks. race-lab's own
    `train` is loaded by now, so a train.py of yours in that folder does not hide it (the check does the same)."""
    here = os.getcwd()
    if not sys.flags.safe_path and here not in sys.path and "" not in sys.path:  # python -P: neither has it
        sys.path.insert(0, here)


def stop_at_once_on_signal(run_dir: str):
    """Ctrl-C (SIGINT to the process group) or the agent's SIGINT/SIGTERM ends this rank at once, wherever
    it is: in Python, a sleep, or a C++ barrier or store wait that a Python handler would not interrupt
    until it returned (up to timeout.collective_s). The signals are blocked in every thread and taken by
    one thread of their own, which records `interrupted` as the rank's last event (no thread records after it)
    and leaves without running anything else: no save, load or training step follows. Call it first, before any other thread exists."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    for signum in STOP_SIGNALS:  # one inherited as ignored would be discarded, never reach sigwait
        signal.signal(signum, signal.SIG_DFL)

    def take():
        signum = signal.sigwait(STOP_SIGNALS)
        try:
            from train.events import EventLog

            EventLog(run_dir, int(os.environ["RANK"])).record_last("interrupted", signal=signal.Signals(signum).name)
        finally:
            end_own_session()  # a driver's own workers (train/rank/worker.py run_driver); a rank leads none
            os._exit(128 + signum)

    threading.Thread(target=take, name="stop-on-signal", daemon=True).start()
