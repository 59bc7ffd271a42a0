"""The Hydra job: one run (or one job of a sweep) from its composed config to an exit code.

Hydra main -> resolve and check the config (preflight.py, plan.py) -> claim the run dir -> one run on this host
(experiment.py), or one node of several (nodes.py) -> ok | n/a | invalid | crashed | unexpected.
It never imports a framework (fastai, Lightning, ...); each rank does, in its own process (train/rank/worker.py).
"""
import sys
import traceback
import uuid
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from train.config import CONFIGS, ConfigError, check
from train.frameworks.registry import register_configs
from train.launch import nodes, sweep
from train.launch.defaults import a_command_that_runs
from train.launch.experiment import run_experiment
from train.launch.folders import register as register_folders
from train.launch.plan import n_a_line, not_applicable, this_machine
from train.launch.preflight import (
    EXIT_BAD_CONFIG,
    EXIT_EXPECT_MISMATCH,
    EXIT_HARNESS,
    EXIT_INTERRUPTED,
    _started,
    check_writable,
    discard_run_dir,
    first_line,
    preflight,
)
from train.report import node_records
from train.report.files import write_json_atomic

PLUGINS = str(Path(__file__).resolve().parent / "plugins")  # its hydra_plugins/: the sweeper configs/train.yaml names
if PLUGINS not in sys.path:  # Hydra looks for plugins in the hydra_plugins namespace, on sys.path
    sys.path.append(PLUGINS)


def run_job(dict_cfg) -> str:
    """One run. In a sweep (-m) a bad or crashed job is reported and the sweep goes on;
    train/launch/sweep.py then exits non-zero at the end. Returns ok | n/a | invalid | crashed | unexpected
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
    scenario, framework = hydra_cfg.runtime.choices.get("scenario"), cfg["framework"]["name"]
    try:
        check(cfg)  # each key in its range first: a bad value is refused, never taken for an n/a cell
        reason = not_applicable(cfg)  # a framework that is not registered, or whose contract is broken: refused
    except ConfigError as e:
        return refuse(e)
    if reason:  # a combination that makes no sense: not run, and not a failure of a sweep
        why = n_a_line(scenario, cfg, reason)
        if not in_sweep:
            runs = a_command_that_runs(scenario, framework)
            return refuse(why + (f"; this runs: {runs}" if runs else ""))
        write_json_atomic(run_dir / "summary.json", {"status": "n/a", "verdict": "n/a", "explanation": why,
                                                      "config": {**cfg, "scenario": scenario}, "ranks": []})
        print(why, flush=True)
        return "n/a"
    try:
        plan = preflight(cfg, this_machine(), given=list(hydra_cfg.overrides.task))
        check_writable(run_dir)
    except ConfigError as e:
        return refuse(e, discard=not (run_dir / "events").exists())
    # one node of a multi-node run keeps its records in nodes/node<K>/: on a shared filesystem (Slurm)
    # every node's launcher has the same run dir
    records = node_records.node_dir(run_dir, cfg["node_rank"]) if nodes.one_of_many(cfg) else run_dir
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


register_configs(CONFIGS)  # `framework=<name>` for a framework of yours, registered with no file in configs/
register_folders()  # ${fresh:...}: the default run and sweep dirs (folders.py)
main = hydra.main(config_path=str(CONFIGS), config_name="train", version_base="1.3")(run_job)


def resolved(dict_cfg) -> dict:
    """The composed config as plain data, every interpolation resolved; one that does not resolve
    (checkpoint.dir='${nope}') is a ConfigError naming the key."""
    try:
        return OmegaConf.to_container(dict_cfg, resolve=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "the config"
        raise ConfigError(f"{key}: {first_line(e)}") from None
