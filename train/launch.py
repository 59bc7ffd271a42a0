"""The launcher: Hydra main -> check the config -> start the ranks with torch elastic
-> collect what they recorded -> summary.json and the console table.

It never imports a framework (fastai, Lightning, ...); each rank does, in its own process (train/worker.py).
"""
import contextlib
import errno
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import traceback
import uuid
import urllib.request
from dataclasses import asdict
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from train.config import ConfigError, check
from train.faults import describe as describe_faults
from train.early import ensure_forkserver
from train import nodes, sweep
from train.nodes import merged_here, rank_start_method  # launch() has a local `nodes`
from train.events import LAUNCHER, EventLog, read_events
from train.outcomes import judge, worst_status
from train.own_class import check_own_class
from train.plan import make_plan, not_applicable, this_machine
from train.rank import rank_main
from train.summary import environment, format_table, write_json_atomic
from train.torch_private import exit_barrier_within, name_rendezvous_events_cheaply, pace_rendezvous

EXIT_EXPECT_MISMATCH, EXIT_BAD_CONFIG, EXIT_HARNESS, EXIT_INTERRUPTED = 1, 2, 3, 130
SHUTDOWN_S = 1  # a rank the agent stops gets this long before SIGKILL (each leaves at once: train/rank.py)
_started = threading.Event()  # set once a run dir is claimed: from then on errors are the run's, not the input's


def started() -> bool:
    return _started.is_set()


def first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:300] if lines else ""


def discard_run_dir(run_dir: Path):
    """Remove what Hydra created for a run that never started; leave anything else alone."""
    shutil.rmtree(run_dir / ".hydra", ignore_errors=True)
    for d in (run_dir, *run_dir.parents):  # and its parents that are now empty, up to the working dir
        if d == Path.cwd() or not d.exists() or any(d.iterdir()):
            break
        d.rmdir()


def check_data_reachable(data: dict):
    """A data set that needs a download must be reachable before any rank starts."""
    try:
        if "url" not in data or Path(data["cache"]).expanduser().exists():
            return
    except (ValueError, OSError, RuntimeError) as e:  # a NUL byte, ~user that does not exist
        raise ConfigError(f"data.cache={data['cache']!r}: not a usable path ({e})") from None
    try:
        urllib.request.urlopen(urllib.request.Request(data["url"], method="HEAD"), timeout=10).close()
    except (OSError, ValueError) as e:
        why = getattr(e, "reason", e)
        raise ConfigError(f"data.url={data['url']!r}: cannot download {data['name']} ({why}); "
                          "data=digits works offline") from None


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


def log_agent_to(path: Path) -> logging.Handler:
    """torch elastic's own warnings (a rank shut down, an exit barrier that lost its peer, with C++ stack
    traces) go to a file in the run dir, not the console, which keeps to the run's own lines. Returns
    the handler; closing it is the caller's."""
    agent = logging.getLogger("torch.distributed.elastic")
    for old in [h for h in agent.handlers if getattr(h, "race_lab", False)]:
        agent.removeHandler(old)
        old.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = QuietFileHandler(path, encoding="utf-8", delay=True)
    handler.race_lab = True
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    agent.addHandler(handler)
    agent.propagate = False
    return handler


def _raise_signal_exception(signum, frame):
    raise SignalException(f"Process {os.getpid()} got signal: {signum}", sigval=signal.Signals(signum))


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


def launch(cfg: dict, plan, run_dir: Path, events: EventLog, echo: bool = True) -> str:
    """Start the ranks and wait for them. Returns ok | failed | interrupted | timeout | harness_error.
    Each rank's output goes to logs/ in the run dir, and with echo to the console too."""
    nodes = cfg["nnodes"]
    launch_cfg = LaunchConfig(
        min_nodes=nodes, max_nodes=nodes, nproc_per_node=cfg["world_size"] // nodes, run_id=cfg["rdzv"]["id"],
        rdzv_backend="c10d", rdzv_endpoint=cfg["rdzv"]["endpoint"],
        rdzv_configs={"join_timeout": cfg["timeout"]["collective_s"], "read_timeout": cfg["timeout"]["collective_s"]},
        max_restarts=cfg["launch"]["max_restarts"], monitor_interval=0.02, start_method=rank_start_method(cfg),
        shutdown_timeout=SHUTDOWN_S,
        logs_specs=DefaultLogsSpecs(log_dir=str(run_dir / "logs"), redirects=Std.ALL,
                                    tee=Std.ALL if echo else Std.NONE),
        log_line_prefix_template="[rank ${rank}] ",  # the global rank, on every node
    )
    if launch_cfg.start_method == "forkserver":
        # ranks fork from a server that has imported the framework once; later jobs of a sweep start in a
        # blink. train/early.py may have started it already, with every framework the command line names.
        # Started here (a side-by-side job's worker), it preloads the node agents' code too: a later
        # two-node job of the worker forks them from it (train/nodes.py)
        ensure_forkserver([cfg["framework"]["adapter"]], nodes_here=True)
    taken = port_in_use(cfg["rdzv"]["endpoint"]) if nodes == 1 else None  # other nodes' agents use it too
    exit_barrier_within(cfg["timeout"]["collective_s"])
    pace_rendezvous(nodes, nodes > 1 and merged_here())
    name_rendezvous_events_cheaply()
    if taken:
        events.record("launch_error", error_type="OSError", message=taken)
        print(f"error: {taken}", file=sys.stderr, flush=True)
        return "harness_error"
    fired = threading.Event()

    def stop_run():  # the agent turns SIGTERM into a shutdown of every rank
        fired.set()
        os.kill(os.getpid(), signal.SIGTERM)

    # SIGINT (Ctrl-C) and SIGTERM (docker stop, Slurm, Kubernetes) stop the run as the agent does once ranks
    # run, also while the rendezvous is still under way: one path, SignalException, for both
    before = {s: signal.signal(s, _raise_signal_exception) for s in (signal.SIGINT, signal.SIGTERM)}

    watchdog = threading.Timer(cfg["timeout"]["run_s"], stop_run)
    watchdog.daemon = True
    watchdog.start()
    agent_log = log_agent_to(run_dir / "logs" / AGENT_LOG)
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
        if fired.is_set():
            return "timeout"
        events.record("signal", name=signal.Signals(e.sigval).name)
        return "interrupted"
    except Exception as e:  # the agent itself failed: rendezvous, forkserver, out of resources
        events.record("launch_error", error_type=type(e).__name__, message=first_line(e))
        traceback.print_exc(file=sys.stderr)
        return "harness_error"
    finally:
        watchdog.cancel()
        agent_log.close()
        for s, handler in before.items():
            signal.signal(s, handler)


def header(cfg: dict, plan, run_dir: Path, nodes_here: bool, one_node_of_many: bool) -> str:
    """What is run, where, and what the scenario injects, in words."""
    if nodes_here:
        where = f"\nnodes: {cfg['nnodes']} on this host, an elastic agent each, rendezvous on loopback"
    elif one_node_of_many:
        where = f"\nnode {cfg['node_rank']} of {cfg['nnodes']}, rendezvous {cfg['rdzv']['endpoint']} id {cfg['rdzv']['id']}"
    else:
        where = ""
    return (f"run dir: {run_dir}\ndevice: {plan.device}+{plan.backend} ({plan.reason})\n"
            f"scenario={cfg['scenario']} callback={cfg['callback']['name']} framework={cfg['framework']['name']} "
            f"world_size={cfg['world_size']} "
            f"epochs={cfg['epochs']}\nfault: {describe_faults(cfg)}{where}")


def run_experiment(cfg: dict, plan, run_dir: Path, task_overrides: list, echo: bool = True) -> dict:
    """Launch, collect, classify; write summary.json and print the outcome table. One node of a
    multi-node run writes node_summary.json instead: it sees only its own ranks. Without echo (a
    sweep's job) what would be printed goes to console.log in the run dir, the ranks' output to logs/."""
    if not echo:
        with open(run_dir / "console.log", "w", encoding="utf-8") as log, contextlib.redirect_stdout(log):
            return _run_experiment(cfg, plan, run_dir, task_overrides, echo)
    return _run_experiment(cfg, plan, run_dir, task_overrides, echo)


def _run_experiment(cfg: dict, plan, run_dir: Path, task_overrides: list, echo: bool) -> dict:
    nodes_here = cfg["nnodes"] > 1 and cfg["launch"]["all_nodes_here"]
    one_node_of_many = nodes.one_of_many(cfg)
    if not nodes.merged_here():  # the node agents of launch.all_nodes_here leave the header to the run's
        print(header(cfg, plan, run_dir, nodes_here, one_node_of_many), flush=True)
    events = EventLog(run_dir, LAUNCHER, name=f"launcher-node{cfg['node_rank']}" if one_node_of_many else None)
    start = dict(world_size=cfg["world_size"], device=plan.device, backend=plan.backend, node_rank=cfg["node_rank"],
                 nnodes=cfg["nnodes"])
    if nodes_here:
        events.record("launch_start", **start)
        disk = nodes.node_disk_form(cfg)
        dirs = nodes.run_nodes_here(cfg, asdict(plan), run_dir, events, disk, echo)
        events.record("launch_end", status=worst_status(nodes.read_node(d)["status"] for d in dirs))
        events.close()
        summary = nodes.merge(dirs, run_dir, asdict(plan))
        nodes.print_merged(summary, run_dir)
        return summary
    before = {s: signal.signal(s, _raise_signal_exception) for s in (signal.SIGINT, signal.SIGTERM)}
    try:  # a signal from launch_start on is the run's interrupt, also before launch() takes over the handlers
        events.record("launch_start", **start)
        status = launch(cfg, plan, run_dir, events, echo)
    except SignalException as e:
        events.record("signal", name=signal.Signals(e.sigval).name)
        status = "interrupted"
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    events.record("launch_end", status=status)
    events.close()
    if one_node_of_many:
        ranks = sorted({e["rank"] for e in read_events(run_dir) if isinstance(e["rank"], int)})
        nodes.write_node_summary(run_dir, cfg, status, {"ranks_here": ranks, "plan": asdict(plan),
                                                        "environment": environment()})
        if not nodes.merged_here():
            print(f"\nnode {cfg['node_rank']} of {cfg['nnodes']}: {status}; ranks {ranks} recorded in {run_dir}",
                  flush=True)
        return nodes.merge_if_all_here(cfg, run_dir, status)

    events = read_events(run_dir)
    verdict = judge(events, cfg["world_size"]).as_dict()
    summary = {**verdict, "status": status, "config": cfg, "plan": asdict(plan), "node_disk": nodes.disk_form(events),
               "environment": environment(), "run_dir": str(run_dir)}
    write_json_atomic(run_dir / "summary.json", summary)
    print("\n" + format_table(verdict) + f"\n\n{verdict['explanation']}\nsummary: {run_dir / 'summary.json'}",
          flush=True)
    return summary


CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def run_job(dict_cfg) -> str:
    """One run. In a sweep (-m) a bad or crashed job is reported and the sweep goes on;
    train/sweep.py then exits non-zero at the end. Returns ok | n/a | invalid | crashed | unexpected
    (side by side also interrupted | not run).
    Hydra's task function, main below; a name of its own so that a side-by-side job's worker process
    (hydra/launcher=jobs) imports it by name instead of being sent a copy of it."""
    hydra_cfg = HydraConfig.get()
    in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
    run_dir = Path(hydra_cfg.runtime.output_dir)
    side_by_side = in_sweep and sweep.side_by_side(hydra_cfg)  # this job runs in a worker process
    if side_by_side and sweep.stopped(hydra_cfg.sweep.dir):  # queued when the sweep was interrupted
        discard_run_dir(run_dir)
        return "not run"

    def refuse(message, discard=True):
        if discard:
            discard_run_dir(run_dir)
        print(f"error: {message}", file=sys.stderr)
        if in_sweep:
            return "invalid"
        sys.exit(EXIT_BAD_CONFIG)

    try:
        cfg = nodes.from_slurm(resolved(dict_cfg))
    except ConfigError as e:
        return refuse(e)
    scenario, fix, framework = hydra_cfg.runtime.choices.get("scenario"), cfg["callback"]["name"], \
        cfg["framework"]["name"]
    try:
        check(cfg)  # each key in its range first: a bad value is refused, never taken for an n/a cell
    except ConfigError as e:
        return refuse(e)
    reason = not_applicable(cfg)
    if reason:  # a combination that makes no sense: not run, and not a failure of a sweep
        which = f"scenario={scenario} callback={fix}" + (f" framework={framework}" if framework != "fastai" else "")
        why = f"{which}: n/a: {reason}"
        if not in_sweep:
            return refuse(why)
        write_json_atomic(run_dir / "summary.json", {"status": "n/a", "verdict": "n/a", "explanation": why,
                                                      "config": {**cfg, "scenario": scenario}, "ranks": []})
        print(why, flush=True)
        return "n/a"
    try:
        plan = preflight(cfg, this_machine())
        check_writable(run_dir)
    except ConfigError as e:
        return refuse(e, discard=not (run_dir / "events").exists())
    # one node of a multi-node run keeps its records in nodes/node<K>/: on a shared filesystem (Slurm)
    # every node's launcher has the same run dir
    records = nodes.node_dir(run_dir, cfg["node_rank"]) if nodes.one_of_many(cfg) else run_dir
    try:  # the claim: of two launches into one run dir, exactly one creates events/
        (records / "events").mkdir(parents=records != run_dir)
    except FileExistsError:
        return refuse(f"hydra.run.dir={run_dir}: already holds a run; give each run its own dir", discard=False)
    _started.set()
    cfg["scenario"] = scenario
    if cfg["rdzv"]["id"] == "auto":
        cfg["rdzv"]["id"] = f"race-{uuid.uuid4().hex[:12]}"

    try:
        summary = run_experiment(cfg, plan, records, list(hydra_cfg.overrides.task),
                                 echo=not in_sweep or cfg["launch"]["echo_ranks"])
    except Exception as e:
        if not in_sweep:
            raise
        (records / "error.txt").write_text(traceback.format_exc())
        print(f"error: the job crashed: {type(e).__name__}: {e} (traceback in {records / 'error.txt'})",
              file=sys.stderr)
        return "crashed"
    finally:
        _started.clear()

    if summary["status"] == "interrupted":
        if in_sweep:  # the sweep ends here; its progress line never comes
            print(f"\n[sweep] {summary['explanation']}; this job's records: {records}", file=sys.stderr, flush=True)
        if side_by_side:  # the sweep's process waits for each worker's job, then exits 130
            return "interrupted"
        sys.exit(EXIT_INTERRUPTED)
    if summary["verdict"] == "error":  # the harness failed, or a rank did outside the experiment
        if not in_sweep:
            sys.exit(EXIT_HARNESS)
        return "error"
    if cfg["expect"] and cfg["expect"] != summary["verdict"]:
        print(f"expected {cfg['expect']}, got {summary['verdict']}", file=sys.stderr)
        if not in_sweep:
            sys.exit(EXIT_EXPECT_MISMATCH)
        return "unexpected"
    return "ok"


main = hydra.main(config_path=str(CONFIGS), config_name="train", version_base="1.3")(run_job)


def resolved(dict_cfg) -> dict:
    """The composed config as plain data, every interpolation resolved; one that does not resolve
    (checkpoint.dir='${nope}') is a ConfigError naming the key."""
    try:
        return OmegaConf.to_container(dict_cfg, resolve=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "the config"
        raise ConfigError(f"{key}: {first_line(e)}") from None


def preflight(cfg: dict, machine, reach_data: bool = True):
    """Every check of a resolved config before any rank starts: the schema's ranges, the rules across keys
    and the machine (train/plan.py), the node disks, a class of your own, the data. Returns the plan;
    raises ConfigError with one line. checkpoint.dir becomes absolute."""
    try:
        cfg["checkpoint"]["dir"] = str(Path(cfg["checkpoint"]["dir"]).resolve())
    except (ValueError, OSError, TypeError) as e:  # a NUL byte, a path the OS refuses, not a string
        raise ConfigError(f"checkpoint.dir={cfg['checkpoint']['dir']!r}: not a usable path ({e})") from None
    plan = make_plan(cfg, machine)
    if cfg["checkpoint"]["keep_existing"]:  # a folder to read what is there (it may be read-only: saves then fail)
        check_folder_readable("checkpoint.dir", Path(cfg["checkpoint"]["dir"]))
    else:
        check_folder_writable("checkpoint.dir", Path(cfg["checkpoint"]["dir"]))
    nodes.node_disk_form(cfg)  # launch.node_disks=mount on a machine that cannot: refused here
    if cfg["callback"]["name"] == "own":
        check_own_class(cfg)
    if reach_data:
        check_data_reachable(cfg["data"])
    return plan


def check_folder_writable(key: str, folder: Path):
    """A folder the run will write (creating it if need be): it, or the nearest folder above it that
    exists, must be a folder this process may write."""
    found = next(p for p in (folder, *folder.parents) if p.exists())
    if not found.is_dir():
        raise ConfigError(f"{key}={str(folder)!r}: {found} is a file, not a folder")
    if not os.access(found, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}={str(folder)!r}: cannot write in {found}")


def check_folder_readable(key: str, folder: Path):
    """A folder whose checkpoint the run reads (checkpoint.keep_existing): it must be a folder, or not be there."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{key}={str(folder)!r}: a file, not a folder")
    found = next(p for p in (folder, *folder.parents) if p.exists())
    if not found.is_dir():
        raise ConfigError(f"{key}={str(folder)!r}: {found} is a file, not a folder")


def check_writable(run_dir: Path):
    """The run dir (Hydra made it) must take our files; say so in one line, not a traceback later. The probe
    has a name of its own: the node launchers of launch.all_nodes_here share one run dir and probe it at once."""
    try:
        with tempfile.TemporaryFile(dir=run_dir, prefix=".write-test-"):
            pass
    except OSError as e:
        raise ConfigError(f"hydra.run.dir={run_dir}: cannot write there ({e.strerror})") from None
