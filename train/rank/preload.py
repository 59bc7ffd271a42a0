"""What the forkserver imports once, before it forks any rank (launch.start_method=forkserver).

Everything a rank would otherwise import lazily on its way to `fit_start` is imported here, once:
torch and the rank's own code (train.rank.worker), the run's framework adapter (train/frameworks/, named after
this module in the preload list: train/launch/forkserver.py), the ~900 modules that Accelerate's `prepare_model` pulls in through
DistributedDataParallel (torch._dynamo with sympy, and torch.distributed's DDP parts), and scikit-learn's
data sets. The digits set, which no config changes (only its split does), is read here too. None of
this starts a thread, opens a process group or touches CUDA, so forking after it is safe.

The forkserver ends with its launcher, even one killed with SIGKILL (train.process.end_with_parent).
Besides the worker's imports, one quiet rule: a rank that the forkserver was still starting when
the run was stopped (Ctrl-C, docker stop) finds its start-up locks already removed by the stopping
launcher. Its FileNotFoundError from SemLock._rebuild is the stop, not a failure, so it ends without
a traceback. Any other error is printed as usual.
A Ctrl-C (SIGINT to the process group) while the forkserver still imports is the launcher's to act on: it stops
the server at exit. So the server ignores SIGINT from its first import on, as it does once it serves (a
KeyboardInterrupt here printed a traceback of torch's import); the ranks it forks take SIGINT again (entry.py).
"""
import signal
import sys
import traceback

signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked while the server started (forkserver.start_now)

from train.process import end_with_parent  # noqa: E402
import train.rank.entry  # noqa: F401,E402  (what a forked rank unpickles: its entry point)
import train.rank.worker  # noqa: F401,E402  (torch and the worker, imported once for every rank)
import torch._dynamo  # noqa: F401,E402  (DistributedDataParallel imports it on first use: about 3 s a rank)
import torch.distributed.algorithms.ddp_comm_hooks  # noqa: F401,E402
import torch.nn.parallel.distributed  # noqa: F401,E402
from train.toolkit.data import preload_digits  # noqa: E402


end_with_parent()  # before the imports: the forkserver goes when its launcher goes, even on SIGKILL

preload_digits()


def _quiet_when_stopped_during_start(kind, error, tb):
    frames = [(frame.filename.rsplit("/", 1)[-1], frame.name) for frame in traceback.extract_tb(tb)]
    if kind is FileNotFoundError and frames[-1:] == [("synchronize.py", "__setstate__")] \
            and ("spawn.py", "_main") in frames:
        return
    sys.__excepthook__(kind, error, tb)


sys.excepthook = _quiet_when_stopped_during_start
