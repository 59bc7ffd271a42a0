"""Start the forkserver's preload (torch, the data: train/rank/preload.py, and the run's framework's modules, which
import fastai, Lightning, transformers, Accelerate or DeepSpeed) before the launcher
imports torch and Hydra composes the config, so the two start-ups overlap instead of adding up.

Only the command line is known this early, so this reads it, and the chosen scenario's file, for
anything that rules the forkserver out: another start method, another Hydra launcher (jobs run
elsewhere), or a flag that only prints (--help, --cfg, ...). Every node's agent on this host
(launch.all_nodes_here) forks from it too (train/launch/nodes.py), so that form wants it as well. When it
cannot tell, the default config decides: forkserver, one node.
The forkserver is ended at exit, used or not (a config error, a sweep of n/a jobs).
This module imports nothing heavy: the launcher never imports fastai.
"""
import atexit
import os
import signal

from train.config import CONFIGS
from train.frameworks.registry import NotAFramework, get



def forkserver_wanted(argv) -> bool:
    for arg in argv:
        if arg.startswith("-") and arg not in ("-m", "--multirun"):
            return False  # --help, --cfg job, --info, -c ...: prints and exits
        key, _, value = arg.lstrip("+~").partition("=")
        if key == "launch.start_method" and value != "forkserver":
            return False
        if key in ("hydra/launcher", "hydra.launcher") or key.startswith("hydra.launcher."):
            return False
        if key == "scenario" and any("start_method" in text for text in scenario_texts(value)):
            return False
    return True


def scenario_texts(value: str) -> list:
    """The text of each scenario file that scenario=<value> names (a,b in a sweep); an unknown name: empty."""
    paths = [CONFIGS / "scenario" / f"{name.strip()}.yaml" for name in value.split(",")]
    return [path.read_text() if path.is_file() else "" for path in paths]


def adapters_named(argv) -> list:
    """The modules of the frameworks that the command line picks (framework=a,b in a sweep), from their contracts
    (train/frameworks/registry.py); none named: the default, fastai's."""
    names = ["fastai"]
    for arg in argv:
        key, _, value = arg.lstrip("+~").partition("=")
        if key == "framework":
            names = [name.strip() for name in value.split(",")]
    return [module for name in names for module in framework_modules(name)]


def framework_modules(name: str) -> list:
    """What the forkserver imports for framework `name` (its contract's modules); none for a name that is no
    framework: the config's checks say so, later, in one line."""
    try:
        return get(name).modules()
    except NotAFramework:
        return []


def nodes_here_named(argv) -> bool:
    """Whether the command line may run every node's agent on this host (launch.all_nodes_here, or a scenario
    that sets it): those agents fork from the forkserver too, and run the launcher's own code."""
    for arg in argv:
        key, _, value = arg.lstrip("+~").partition("=")
        if key == "launch.all_nodes_here" and value.lower() != "false":
            return True
        if key == "scenario" and any("all_nodes_here" in text for text in scenario_texts(value)):
            return True
    return False


def preload_list(adapters, nodes_here: bool = False) -> list:
    """What the forkserver imports: the framework-free rank code, then each adapter (its framework);
    with nodes_here also the launcher's code (Hydra's part of it) that a node agent runs."""
    return ["train.rank.preload", *adapters, *(["train.launch.job"] if nodes_here else [])]


def start_forkserver(argv) -> bool:
    """Start the forkserver now when the command line allows it; True when started."""
    if not forkserver_wanted(argv):
        return False
    ensure_forkserver(adapters_named(argv), nodes_here_named(argv))
    start_now()  # returns at once; the server imports in its own process
    return True


def start_now():
    """Start the forkserver (if it is not running) with SIGINT blocked, until its preload ignores it
    (train/rank/preload.py): a Ctrl-C as it starts is the launcher's to act on, which takes it as soon as the
    server is started (a KeyboardInterrupt in the server's own start-up printed a traceback)."""
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()  # first: its own start unblocks SIGINT when done (CPython's bpo-33613 mask)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def ensure_forkserver(adapters, nodes_here: bool = False):
    """The forkserver that ranks (and the node agents of launch.all_nodes_here) fork from preloads these
    adapters, unless it runs already; it is stopped at exit, once however many jobs a sweep runs."""
    import multiprocessing

    multiprocessing.set_forkserver_preload(preload_list(adapters, nodes_here))  # no effect on one running already
    atexit.unregister(stop_forkserver)
    atexit.register(stop_forkserver)


def stop_forkserver():
    """End the forkserver and its resource tracker, and wait for both, so nothing outlives the run.
    The server holds nothing to flush (its ranks have ended, or it never forked one), so it is ended
    with SIGKILL: a plain stop lets it tear down fastai and torch, about 2 s, or lets it finish a
    preload still under way. (_stop is what CPython's own tests use; were it missing we would only
    lose the wait.)"""
    from multiprocessing import forkserver, resource_tracker

    server = forkserver._forkserver
    pid = getattr(server, "_forkserver_pid", None)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for helper in (server, resource_tracker._resource_tracker):
        try:
            getattr(helper, "_stop", lambda: None)()
        except ChildProcessError:  # already reaped
            pass
        except (FileNotFoundError, TypeError):  # in a side-by-side job's worker (loky's process) the
            pass  # temp dir is gone by now, and the tracker may have no pid: nothing left to wait for
