"""Driving torch elastic: start the ranks with elastic_launch, stop them on a signal or the run's time limit, and record how each one failed."""
import errno
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from train.events import EventLog, read_events
from train.frameworks.registry import get as framework_named
from train.judge.crash_loop import crash_loop
from train.launch.forkserver import ensure_forkserver, framework_modules, start_now as start_forkserver_now
from train.launch.held_signal import held, holding_signals
from train.launch.nodes import rank_start_method
from train.launch.preflight import first_line
from train.launch.quiet import quiet_console
from train.rank.entry import rank_main
from train.report.node_records import merged_here
from train.torch_private import (
    exit_barrier_within,
    name_rendezvous_events_cheaply,
    pace_rendezvous,
)

SHUTDOWN_S = 1  # a rank the agent stops gets this long before SIGKILL (each leaves at once: train/rank/entry.py)


def failure_message(failure, log: Path = None) -> str:
    """One line on how a rank died: its exception type and first line where it left one (the
    traceback stays in its log), else its exit code or signal."""
    if failure.error_file and os.path.isfile(failure.error_file):
        message = failure.message
        if isinstance(message, dict):  # torch elastic's error file: {"message": ..., "extraInfo": ...}
            message = message.get("message", "")
        lines = str(message).strip().splitlines()
        if lines:
            return lines[0][:300]
    if failure.exitcode < 0:
        return f"killed by {failure.signal_name()}"
    raised = last_exception_line(log) if log else None
    return raised or f"exit code {failure.exitcode}"


def last_exception_line(log: Path):
    """The `SomeError: message` line that ends a traceback in a rank's stderr log, if there is one."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception|Interrupt)\b:?", line)]
    return found[-1][:300] if found else None


def failure_log(failure, run_dir: Path):
    """The rank's stderr log (its traceback): beside its error file, else where torch elastic keeps
    that local rank's logs in this run dir."""
    if failure.error_file and os.path.isfile(failure.error_file):
        return Path(failure.error_file).parent / "stderr.log"
    found = sorted((run_dir / "logs").glob(f"*/attempt_*/{failure.local_rank}/stderr.log"))
    return found[-1] if found else None


def relative(path, run_dir: Path) -> str:
    if path is None:
        return ""
    try:
        return str(Path(path).relative_to(run_dir))
    except ValueError:
        return str(path)


AGENT_LOG = "agent.log"  # torch elastic's own log lines, in the run dir's logs/


class QuietFileHandler(logging.FileHandler):
    """A log file whose record that cannot be written is dropped, not printed with a traceback: a second stop
    signal (Ctrl-C to the group, then the SIGTERM passed on) raises SignalException inside the agent's own
    warning about the first, while it is shutting down already."""

    def handleError(self, record):
        pass


def log_agent_to(path: Path, *also: logging.Handler) -> logging.Handler:
    """torch elastic's own warnings (a rank shut down, an exit barrier that lost its peer, with C++ stack
    traces) go to a file in the run dir, not the console, which keeps to the run's own lines. Returns
    the handler; closing it is the caller's."""
    agent = logging.getLogger("torch.distributed.elastic")
    for old in [h for h in agent.handlers if getattr(h, "race_lab", False)]:
        agent.removeHandler(old)
        old.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = QuietFileHandler(path, encoding="utf-8", delay=True)
    handler.setLevel(logging.WARNING)  # the restart gate lets the agent's info lines through to handlers
    handler.race_lab = True
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    agent.addHandler(handler)
    for other in also:
        other.race_lab = True
        agent.addHandler(other)
    agent.propagate = False
    return handler


def raise_signal_exception(signum, frame):
    raise SignalException(f"Process {os.getpid()} got signal: {signum}", sigval=signal.Signals(signum))


def raise_held():
    """Inside a run's handlers: a signal held before them is the run's interrupt."""
    if held:
        raise_signal_exception(held.pop(), None)


def port_in_use(endpoint: str):
    """A fixed rendezvous port on this host that another process holds: the reason, else None."""
    host, _, port = endpoint.rpartition(":")
    if int(port) == 0:
        return None
    try:
        with socket.create_server((host, int(port))):
            return None
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            return None  # not ours to bind (another host's address): the rendezvous will tell
        return f"rdzv.endpoint={endpoint}: the port is already in use by another process"


class Stopper(logging.Handler):
    """Ends the run from another thread (the time limit, a crash loop): SIGTERM to this process, which torch
    elastic's agent turns into a shutdown of every rank. Sent again every RESEND_S until the agent says it took it
    (its log record "Received 15 death signal, shutting down workers") or has returned: a SIGTERM that lands while
    the agent stops a failed attempt's log tailers is caught there (tail_log.py logs it as "error in log tailer")
    and the agent restarts the group as if nothing came."""
    RESEND_S = 0.5

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.why = None  # timeout | crash_loop, once stopping
        self.returned = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._sender = None

    def emit(self, record):  # a handler on torch elastic's loggers (log_agent_to)
        if "death signal" in record.getMessage():
            self._done.set()

    def stop(self, why: str, send: bool = True):
        """Stop for this reason: with send, by SIGTERM from a thread of ours; without, the caller raises in the
        agent's own thread. False where a stop is under way already or the agent has returned."""
        with self._lock:
            if self.why or self.returned:
                return False
            self.why = why
            if send:
                self._sender = threading.Thread(target=self._send, name="race-lab-stop", daemon=True)
                self._sender.start()
            return True

    def _send(self):
        while True:
            with self._lock:
                if self.returned or self._done.is_set():
                    return
                os.kill(os.getpid(), signal.SIGTERM)
            if self._done.wait(self.RESEND_S):
                return

    def finish(self):
        """The agent has returned: no SIGTERM is sent after this."""
        with self._lock:
            self.returned = True
        self._done.set()
        if self._sender is not None:
            self._sender.join()

    def on_signal(self, signum, frame):
        if self.returned and signum == signal.SIGTERM:
            return  # our own stop, sent again as the agent returned
        raise_signal_exception(signum, frame)


# torch elastic's agent logs "... will restart worker group" (info) just before a restart: its text, not API. Were it
# reworded, the gate would not fire and a crash loop would run to launch.max_restarts or timeout.run_s (the
# crash-loop test in tests/e2e/test_refusals.py fails then)
RESTART_LOGGER = "torch.distributed.elastic.agent.server.api"


class RestartGate(logging.Handler):
    """Ends a resume run at the agent's restart once its crash loop is certain (train/judge/crash_loop.py): two
    attempts in a row died in the same place. It runs in the agent's own thread, at the line the agent logs just
    before it restarts the group, and raises there the SignalException a SIGTERM would: the agent shuts every
    rank down as for a SIGTERM, and no attempt begins after the loop is certain. (A thread of ours that watched
    the events and sent SIGTERM let the agent begin up to nine more attempts on loaded cores.)"""

    def __init__(self, run_dir: Path, events: EventLog, stopper: Stopper):
        super().__init__(level=logging.INFO)
        self.run_dir, self.events, self.stopper = run_dir, events, stopper

    def emit(self, record):
        if "will restart worker group" not in record.getMessage():
            return
        found = crash_loop(read_events(self.run_dir))
        if found and self.stopper.stop("crash_loop", send=False):
            self.events.record("crash_loop", **found)
            raise SignalException("crash loop", sigval=signal.SIGTERM)


def may_loop(cfg: dict) -> bool:
    """Whether a run can crash-loop: a resume run with restarts."""
    return cfg["workload"] == "resume" and cfg["launch"]["max_restarts"] > 0


CRASH_LOOP_POLL_S = 0.25


def watch_for_crash_loop(cfg: dict, run_dir: Path, events: EventLog, stopper: Stopper):
    """For a framework that restarts its own workers (Ray), where no agent restarts them: a thread that ends the run
    by SIGTERM once the events prove a crash loop while restarts remain. Returns the thread, or None."""
    restarts = cfg["launch"]["max_restarts"]
    if not may_loop(cfg) or not framework_named(cfg["framework"]["name"]).own_workers:
        return None

    def watch():
        while not stopper.why and not stopper.returned:
            found = crash_loop(read_events(run_dir))
            if found and found["attempts"][-1] < restarts:  # it would be restarted again
                events.record("crash_loop", **found)
                stopper.stop("crash_loop")
                return
            time.sleep(CRASH_LOOP_POLL_S)

    thread = threading.Thread(target=watch, name="race-lab-crash-loop", daemon=True)
    thread.start()
    return thread


def gate_restarts(cfg: dict, run_dir: Path, events: EventLog, stopper: Stopper):
    """The handler that ends a crash loop at the agent's restart, or None where none can loop (no restarts, not a
    resume run, or a framework that restarts its own workers). Pass it to log_agent_to."""
    if not may_loop(cfg) or framework_named(cfg["framework"]["name"]).own_workers:
        return None
    logging.getLogger(RESTART_LOGGER).setLevel(logging.INFO)  # torch elastic sets its loggers to WARNING
    return RestartGate(run_dir, events, stopper)


def run_agent(launch_cfg: LaunchConfig, cfg: dict, plan, run_dir: Path, events: EventLog,
              stopper: Stopper) -> str:
    """torch elastic's agent from the rendezvous to the ranks' end; the status, each rank's failure recorded."""
    try:
        returned = elastic_launch(launch_cfg, rank_main)(cfg, asdict(plan), str(run_dir))
        events.record("ranks_returned", ranks=sorted(returned))
        return "ok"
    except ChildFailedError as e:
        for rank, failure in sorted(e.failures.items()):
            log = failure_log(failure, run_dir)
            events.record("rank_failed", failed_rank=rank, exitcode=failure.exitcode,
                          message=failure_message(failure, log), log=relative(log, run_dir))
        return "failed"
    except SignalException as e:
        if stopper.why:
            return stopper.why
        events.record("signal", name=signal.Signals(e.sigval).name)
        return "interrupted"
    except Exception as e:  # the agent itself failed: rendezvous, forkserver, out of resources
        events.record("launch_error", error_type=type(e).__name__, message=first_line(e))
        traceback.print_exc(file=sys.stderr)  # the console shows its last line; logs/launcher.log all of it
        return "harness_error"


def launch(cfg: dict, plan, run_dir: Path, events: EventLog, echo: bool = True) -> str:
    """Start the ranks and wait for them. Returns ok | failed | interrupted | timeout | crash_loop | harness_error.
    Each rank's output goes to logs/ in the run dir, and with echo to the console too."""
    nodes = cfg["nnodes"]
    # a framework that starts its own workers (Ray) gets one driver process a node, which it restarts itself
    own_workers = framework_named(cfg["framework"]["name"]).own_workers
    launch_cfg = LaunchConfig(
        min_nodes=nodes, max_nodes=nodes, nproc_per_node=1 if own_workers else cfg["world_size"] // nodes,
        run_id=cfg["rdzv"]["id"],
        rdzv_backend="c10d", rdzv_endpoint=cfg["rdzv"]["endpoint"],
        rdzv_configs={"join_timeout": cfg["timeout"]["collective_s"], "read_timeout": cfg["timeout"]["collective_s"]},
        max_restarts=0 if own_workers else cfg["launch"]["max_restarts"], monitor_interval=0.02, start_method=rank_start_method(cfg),
        shutdown_timeout=SHUTDOWN_S,
        logs_specs=DefaultLogsSpecs(log_dir=str(run_dir / "logs"), redirects=Std.ALL,
                                    tee=Std.ALL if echo else Std.NONE),
        log_line_prefix_template="[rank ${rank}] ",  # the global rank, on every node
    )
    if launch_cfg.start_method == "forkserver":
        # ranks fork from a server that has imported the framework once; later jobs of a sweep start in a
        # blink. train/launch/forkserver.py may have started it already, with every framework the command line names.
        # Started here (a side-by-side job's worker), it preloads the node agents' code too: a later
        # two-node job of the worker forks them from it (train/launch/nodes.py)
        ensure_forkserver(framework_modules(cfg["framework"]["name"]), nodes_here=True)
        # started now, not at the first rank inside quiet_console: the server, and the node agents and ranks it
        # forks, keep the console as their stderr, not this run's logs/launcher.log (returns at once)
        start_forkserver_now()
    taken = port_in_use(cfg["rdzv"]["endpoint"]) if nodes == 1 else None  # other nodes' agents use it too
    exit_barrier_within(cfg["timeout"]["collective_s"])
    pace_rendezvous(nodes, nodes > 1 and merged_here())
    name_rendezvous_events_cheaply()
    if taken:
        events.record("launch_error", error_type="OSError", message=taken)
        print(f"error: {taken}", file=sys.stderr, flush=True)
        return "harness_error"
    stopper = Stopper()
    with holding_signals():  # a signal as the threads start is raised below, once each is running
        # timeout.run_s bounds the whole run, every restart included
        watchdog = threading.Timer(cfg["timeout"]["run_s"], stopper.stop, args=("timeout",))
        watchdog.daemon = True
        watchdog.start()
        gate = gate_restarts(cfg, run_dir, events, stopper)
        agent_log = log_agent_to(run_dir / "logs" / AGENT_LOG, stopper, *([gate] if gate else []))
        watch_for_crash_loop(cfg, run_dir, events, stopper)
    # SIGINT (Ctrl-C) and SIGTERM (docker stop, Slurm, Kubernetes) stop the run as the agent does once ranks
    # run, also while the rendezvous is still under way: one path, SignalException, for both
    before = {s: signal.signal(s, stopper.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        raise_held()
        with quiet_console(run_dir):  # torch's C++ warnings and stack traces: to logs/launcher.log
            return run_agent(launch_cfg, cfg, plan, run_dir, events, stopper)
    except SignalException as e:  # a signal as the quiet console was set up or put back
        if stopper.why:
            return stopper.why
        events.record("signal", name=signal.Signals(e.sigval).name)
        return "interrupted"
    finally:
        watchdog.cancel()
        stopper.finish()
        agent_log.close()
        for s, handler in before.items():
            signal.signal(s, handler)
