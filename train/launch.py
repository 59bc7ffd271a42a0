"""The launcher: Hydra main -> check the config -> start the ranks with torch elastic
-> collect what they recorded -> summary.json and the console table.

It never imports fastai; each rank does, in its own process (train/worker.py).
"""
import atexit
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import traceback
import urllib.request
from dataclasses import asdict
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf
from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from train.events import LAUNCHER, EventLog, read_events
from train.outcomes import judge
from train.plan import ConfigError, make_plan
from train.summary import environment, format_table, write_json_atomic

EXIT_EXPECT_MISMATCH, EXIT_BAD_CONFIG, EXIT_INTERRUPTED = 1, 2, 130


@record
def rank_main(cfg: dict, plan: dict, run_dir: str) -> dict:
    """Each rank's entry point (a top-level function, so spawn can import it)."""
    from train.worker import run_rank

    return run_rank(cfg, plan, run_dir)


def discard_run_dir(run_dir: Path):
    """Remove what Hydra created for a run that never started; leave anything else alone."""
    shutil.rmtree(run_dir / ".hydra", ignore_errors=True)
    for d in (run_dir, *run_dir.parents):  # and its parents that are now empty, up to the working dir
        if d == Path.cwd() or not d.exists() or any(d.iterdir()):
            break
        d.rmdir()


def check_data_reachable(data: dict):
    """A data set that needs a download must be reachable before any rank starts."""
    if "url" not in data or Path(data["cache"]).expanduser().exists():
        return
    try:
        urllib.request.urlopen(urllib.request.Request(data["url"], method="HEAD"), timeout=10).close()
    except (OSError, ValueError) as e:
        why = getattr(e, "reason", e)
        raise ConfigError(f"data.url={data['url']!r}: cannot download {data['name']} ({why}); "
                          "data=digits works offline") from None


def stop_forkserver():
    """Left alone, the forkserver and its resource tracker exit a moment after the launcher;
    stop both and wait for them, so nothing outlives the run. (_stop is what CPython's own
    tests use; were it missing we would only lose the wait.)"""
    from multiprocessing import forkserver, resource_tracker

    for helper in (forkserver._forkserver, resource_tracker._resource_tracker):
        getattr(helper, "_stop", lambda: None)()


def failure_message(failure) -> str:
    """One line on how a rank died: its exception where it left one, else its exit code or signal."""
    if failure.error_file and os.path.isfile(failure.error_file):
        return str(failure.message).strip().splitlines()[0][:300]
    if failure.exitcode < 0:
        return f"killed by {failure.signal_name()}"
    return f"exit code {failure.exitcode}"


def launch(cfg: dict, plan, run_dir: Path, events: EventLog) -> str:
    """Start the ranks and wait for them. Returns ok | failed | interrupted | timeout."""
    launch_cfg = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=cfg["world_size"], run_id="race",
        rdzv_backend="c10d", rdzv_endpoint="localhost:0",  # one node; port 0: a free port
        rdzv_configs={"join_timeout": cfg["timeout"]["collective_s"]},
        max_restarts=0, monitor_interval=0.1, start_method=cfg["launch"]["start_method"],
        logs_specs=DefaultLogsSpecs(log_dir=str(run_dir / "logs"), redirects=Std.ALL, tee=Std.ALL),
    )
    if launch_cfg.start_method == "forkserver":
        # ranks fork from a server that has imported fastai once; later jobs of a sweep start in a blink
        multiprocessing.set_forkserver_preload(["train.worker"])
        atexit.unregister(stop_forkserver)  # once per process, however many jobs a sweep runs
        atexit.register(stop_forkserver)
    fired = threading.Event()

    def stop_run():  # the agent turns SIGTERM into a shutdown of every rank
        fired.set()
        os.kill(os.getpid(), signal.SIGTERM)

    watchdog = threading.Timer(cfg["timeout"]["run_s"], stop_run)
    watchdog.daemon = True
    watchdog.start()
    try:
        returned = elastic_launch(launch_cfg, rank_main)(cfg, asdict(plan), str(run_dir))
        events.record("ranks_returned", ranks=sorted(returned))
        return "ok"
    except ChildFailedError as e:
        for rank, failure in sorted(e.failures.items()):
            events.record("rank_failed", failed_rank=rank, exitcode=failure.exitcode,
                          message=failure_message(failure))
        return "failed"
    except (SignalException, KeyboardInterrupt):
        return "timeout" if fired.is_set() else "interrupted"
    finally:
        watchdog.cancel()


def run_experiment(cfg: dict, plan, run_dir: Path) -> dict:
    """Launch, collect, classify; write summary.json and print the outcome table."""
    print(f"run dir: {run_dir}\ndevice: {plan.device}+{plan.backend} ({plan.reason})\n"
          f"callback={cfg['callback']['name']} world_size={cfg['world_size']} epochs={cfg['epochs']} "
          f"skew: rank {cfg['skew']['rank']} sleeps {cfg['skew']['seconds']} s before the last save", flush=True)
    events = EventLog(run_dir, LAUNCHER)
    events.record("launch_start", world_size=cfg["world_size"], device=plan.device, backend=plan.backend)
    status = launch(cfg, plan, run_dir, events)
    events.record("launch_end", status=status)
    events.close()

    verdict = judge(read_events(run_dir), cfg["world_size"]).as_dict()
    summary = {**verdict, "status": status, "config": cfg, "plan": asdict(plan),
               "environment": environment(), "run_dir": str(run_dir)}
    write_json_atomic(run_dir / "summary.json", summary)
    print("\n" + format_table(verdict) + f"\n\n{verdict['explanation']}\nsummary: {run_dir / 'summary.json'}",
          flush=True)
    return summary


CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@hydra.main(config_path=str(CONFIGS), config_name="train", version_base="1.3")
def main(dict_cfg) -> str:
    """One run. In a sweep (-m) a bad or crashed job is reported and the sweep goes on;
    train/sweep.py then exits non-zero at the end. Returns ok | invalid | crashed | unexpected."""
    hydra_cfg = HydraConfig.get()
    in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
    run_dir = Path(hydra_cfg.runtime.output_dir)
    cfg = OmegaConf.to_container(dict_cfg, resolve=True)
    cfg["checkpoint"]["dir"] = str(Path(cfg["checkpoint"]["dir"]).resolve())
    if (run_dir / "events").exists():  # never mix two runs' events, never delete a result
        print(f"error: hydra.run.dir={run_dir}: already holds a run; give each run its own dir", file=sys.stderr)
        if in_sweep:
            return "invalid"
        sys.exit(EXIT_BAD_CONFIG)
    try:
        plan = make_plan(cfg, torch.cuda.device_count())
        check_data_reachable(cfg["data"])
    except ConfigError as e:
        discard_run_dir(run_dir)
        print(f"error: {e}", file=sys.stderr)
        if in_sweep:
            return "invalid"
        sys.exit(EXIT_BAD_CONFIG)

    try:
        summary = run_experiment(cfg, plan, run_dir)
    except Exception as e:
        if not in_sweep:
            raise
        (run_dir / "error.txt").write_text(traceback.format_exc())
        print(f"error: the job crashed: {type(e).__name__}: {e} (traceback in {run_dir / 'error.txt'})",
              file=sys.stderr)
        return "crashed"

    if summary["status"] == "interrupted":
        sys.exit(EXIT_INTERRUPTED)
    if cfg["expect"] and cfg["expect"] != summary["verdict"]:
        print(f"expected {cfg['expect']}, got {summary['verdict']}", file=sys.stderr)
        if not in_sweep:
            sys.exit(EXIT_EXPECT_MISMATCH)
        return "unexpected"
    return "ok"
