"""A process that ends with its parent (the forkserver, each rank, each node agent, a sweep's job worker)."""
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def end_with_parent():
    """Have Linux SIGKILL this process when its parent dies. Called first in the forkserver (its
    preload) and in each rank: a launcher killed with SIGKILL (kill -9, the OOM killer) then takes its
    forkserver along, and the forkserver its ranks, instead of leaving them to run on. Elsewhere, a no-op."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before we asked
        os._exit(1)


def end_descendants(grace_s: float = 0.2):
    """End every process this one started, and theirs, before it leaves an interrupted run or check: those still
    there after grace_s (the time a rank takes to record its interrupt and leave) are killed. What is left then
    holds no record: a forkserver, its resource tracker (which ignores SIGINT and SIGTERM), a worker's last child.
    Without it they outlived an interrupted check by 1 to 4 s."""
    import psutil

    try:
        left = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    _, alive = psutil.wait_procs(left, timeout=grace_s)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=1.0)


def lead_own_session():
    """Make this process the leader of a session of its own, which every process it starts inherits, and theirs,
    also one whose parent died (a framework's workers: train/rank/worker.py's run_driver). end_own_session ends
    them all. Not for a process group leader (setsid refuses it)."""
    os.setsid()


_AT_SESSION_END = []  # what end_own_session does once the session's processes are gone


def at_session_end(do):
    """Have end_own_session call `do()` once it killed the session: a driver's cleanup that must also happen when it
    is stopped at once (Ray's temp dir outside the run dir)."""
    _AT_SESSION_END.append(do)


def end_own_session():
    """SIGKILL every other process of the session this one leads (lead_own_session), until none is left: a Ray
    worker that was still starting when its raylet died kept running for up to a minute after a stopped run.
    Nothing where this process leads no session."""
    me = os.getpid()
    if os.getsid(0) != me:
        return
    for _ in range(5):  # one started while the previous pass looked is found by the next
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != me:
                try:
                    if os.getsid(int(name)) == me:
                        os.kill(int(name), signal.SIGKILL)
                        found.append(name)
                except (ProcessLookupError, PermissionError):
                    pass
        if not found:
            break
    for do in _AT_SESSION_END:
        do()
