"""Which jobs of a sweep run: a job whose cell is n/a (plan.py's not_applicable) is left out before any job is
launched, and recorded in <sweep dir>/not_run.json, from which the report puts it in the matrix with its reason.

Hydra's sweeper (hydra_plugins/race_lab_sweeper.py, beside this file) calls split_jobs with the jobs it expanded.
Composing a config takes Hydra about 0.2 s, so it is done once a row: the jobs that differ only in `repeat=N` and
`fix=NAME`. A fix's node is its file on the schema's defaults (configs/fix/ files set only their own node), checked
against the row's composed config; a job whose fix file does more, or whose overrides touch fix.*, is composed
whole. A job whose config does not resolve or holds a bad value is not left out: it runs, and the job refuses it.
"""
import copy
import re

from omegaconf import OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from train.config import CONFIGS, ConfigError, FixConfig, check
from train.launch.plan import n_a_line, not_applicable
from train.report.files import write_json_atomic
from train.report.run_records import NOT_RUN

_REPEAT = re.compile(r"^repeat=\d+$")  # a plain repeat label: no key the n/a rule reads can differ by it
_FIX = re.compile(r"^fix=(\w+)$")  # a plain choice of the fix group
KEPT = ("scenario", "framework", "fix", "skew", "world_size", "epochs", "seed", "repeat")  # what the report reads


def row_of(overrides):
    """The job's overrides less its repeat label and its fix, or None where another override touches fix.*."""
    rest = [o for o in overrides if not _REPEAT.match(o) and not _FIX.match(o)]
    return None if any(o.lstrip("+~").startswith("fix") for o in rest) else tuple(rest)


def fix_node(name: str):
    """configs/fix/<name>.yaml on the schema's defaults, as Hydra composes the group; None where the file does
    more than set its own node (a package or defaults list of its own) or is not there."""
    path = CONFIGS / "fix" / f"{name}.yaml"
    try:
        text = path.read_text()
    except OSError:
        return None
    if "@package" in text or re.search(r"^defaults\s*:", text, re.M):
        return None
    return OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(FixConfig), OmegaConf.load(path)),
                                  resolve=True)


def task_config(sweep_cfg) -> dict:
    """The job's config as its task gets it (Hydra's node dropped, every value resolved), with the job's output
    dir not yet known: the sweep dir stands in for it (checkpoint.dir names it). Raises where the job would fail."""
    from hydra.core.hydra_config import HydraConfig

    cfg = copy.deepcopy(sweep_cfg)
    with read_write(cfg.hydra.runtime), open_dict(cfg.hydra.runtime):
        cfg.hydra.runtime.output_dir = str(cfg.hydra.sweep.dir)
    task = copy.deepcopy(cfg)
    with read_write(task), open_dict(task):
        del task["hydra"]
    hydra_config = HydraConfig.instance()
    before = hydra_config.cfg
    hydra_config.set_config(cfg)  # for ${hydra:...}
    try:
        return OmegaConf.to_container(task, resolve=True)
    finally:
        hydra_config.cfg = before


def decide(cfg: dict):
    """The n/a line of the job's cell, as its job would print it, or None: the job runs (or refuses its config)."""
    try:
        check({k: v for k, v in cfg.items() if k != "scenario"})  # a bad value is the job's to refuse, never n/a
        reason = not_applicable(cfg)  # a framework that is not registered: the job's to refuse too
    except ConfigError:
        return None
    return n_a_line(cfg["scenario"], cfg, reason) if reason else None


def composed(sweep_cfg):
    """(the job's task config with its scenario, or None where it does not resolve: the job says why)."""
    try:
        cfg = task_config(sweep_cfg)
    except (ConfigError, OmegaConfBaseException, ValueError, TypeError, KeyError):
        return None
    return {**cfg, "scenario": sweep_cfg.hydra.runtime.choices.get("scenario")}


def record(cfg: dict, line: str, overrides) -> dict:
    """What the job would have written to its summary.json: n/a, its reason, the keys the report reads."""
    repeat = next((int(o.partition("=")[2]) for o in overrides if _REPEAT.match(o)), None)
    kept = {k: cfg[k] for k in KEPT if k in cfg}
    return {"status": "n/a", "verdict": "n/a", "explanation": line,
            "config": {**kept, **({"repeat": repeat} if repeat is not None else {})}, "ranks": [],
            "overrides": list(overrides)}


def split_jobs(jobs, compose) -> tuple:
    """(the jobs that run, the records of those left out as n/a), in the sweep's order. compose(overrides) gives a
    job's composed config (Hydra's config loader); it runs once a row, and for a job whose fix cannot be read apart."""
    nodes, rows, whole, run, left_out = {}, {}, {}, [], []
    for overrides in jobs:
        cfg, row, fix = None, row_of(overrides), next((m[1] for m in map(_FIX.match, overrides) if m), None)
        if fix not in nodes:
            nodes[fix] = fix_node(fix) if fix else None
        if row is not None and nodes[fix] is not None:
            if row not in rows:  # the row's config; its fix read apart must be the one Hydra composed
                first = composed(compose(overrides))
                rows[row] = first if first is not None and first["fix"] == nodes[fix] else None
            cfg = rows[row] and {**rows[row], "fix": nodes[fix]}
        if cfg is None:
            cell = tuple(o for o in overrides if not _REPEAT.match(o))
            if cell not in whole:
                whole[cell] = composed(compose(overrides))
            cfg = whole[cell]
        line = decide(cfg) if cfg is not None else None
        if line is None:
            run.append(list(overrides))
        else:
            left_out.append(record(cfg, line, overrides))
    return run, left_out


def write_not_run(sweep_dir, left_out: list):
    """<sweep dir>/not_run.json: the jobs left out, each as its summary.json would have been."""
    write_json_atomic(sweep_dir / NOT_RUN, {"n/a": left_out})
