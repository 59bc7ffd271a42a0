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
