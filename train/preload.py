"""What the forkserver imports once, before it forks any rank (launch.start_method=forkserver).

Besides the worker's imports, one quiet rule: a rank that the forkserver was still starting when
the run was stopped (Ctrl-C, docker stop) finds its start-up locks already removed by the stopping
launcher. Its FileNotFoundError from SemLock._rebuild is the stop, not a failure, so it ends without
a traceback. Any other error is printed as usual.
"""
import sys
import traceback

import train.worker  # noqa: F401  (fastai, torch and the worker, imported once for every rank)


def _quiet_when_stopped_during_start(kind, error, tb):
    frames = [(frame.filename.rsplit("/", 1)[-1], frame.name) for frame in traceback.extract_tb(tb)]
    if kind is FileNotFoundError and frames[-1:] == [("synchronize.py", "__setstate__")] \
            and ("spawn.py", "_main") in frames:
        return
    sys.__excepthook__(kind, error, tb)


sys.excepthook = _quiet_when_stopped_during_start
