"""Defaults that run: the command line a user types, with what it leaves out filled in so that it reaches a verdict.

- `framework=lightning` alone runs Lightning as shipped (its contract's `as_shipped_fix`), not the default fix,
  which is fastai's.
- `scenario=crash_mid_save` alone (a scenario of `workload: resume`) runs a framework that resumes: torch_loop,
  with its own as-shipped fix.
Only a single value is filled in from another: a sweep over frameworks (`framework=a,b`) keeps every fix given.
Read before Hydra composes (from configs/), so Hydra sees an ordinary command line.
"""
import re
from dataclasses import asdict

import yaml
from omegaconf import OmegaConf

from train.config import CONFIGS

RESUMING_FRAMEWORK = "torch_loop"  # the framework a resume scenario gets when none is given: its loop only resumes
_CHOICE = re.compile(r"^(?:\+{0,2})(framework|scenario|fix)=(.*)$")


def _chosen(argv: list) -> dict:
    """group -> the value given on the command line, for framework, scenario and fix."""
    found = {}
    for arg in argv:
        match = _CHOICE.match(arg)
        if match:
            found[match[1]] = match[2]
    return found


def _one_name(value) -> bool:
    return bool(value) and re.fullmatch(r"[A-Za-z0-9_]+", value) is not None


def read_option(group: str, name: str) -> dict:
    """configs/<group>/<name>.yaml as plain data; {} when it is not there or not YAML."""
    path = CONFIGS / group / f"{name}.yaml"
    try:
        return OmegaConf.to_container(OmegaConf.load(path)) or {}
    except (OSError, yaml.YAMLError):  # not there, or not YAML: Hydra says so in its own words when it composes
        return {}


def with_defaults_filled(argv: list) -> list:
    """argv, plus `framework=torch_loop` for a resume scenario given alone and `fix=<as shipped>` for a framework
    given without a fix. Options (-m, hydra.*) and every other key pass through unchanged."""
    chosen = _chosen(argv)
    added = []
    framework = chosen.get("framework")
    scenario = chosen.get("scenario")
    if framework is None and _one_name(scenario) and read_option("scenario", scenario).get("workload") == "resume":
        framework = RESUMING_FRAMEWORK
        added.append(f"framework={framework}")
    if "fix" not in chosen and _one_name(framework):
        fix = as_shipped_fix(framework)
        if fix:
            added.append(f"fix={fix}")
    return _beside_the_overrides(list(argv), added)


def _beside_the_overrides(argv: list, added: list) -> list:
    """argv with `added` right after its first run of key=value overrides: Hydra's parser takes the overrides as one
    positional run, so keys appended after an option (`framework=deepspeed --cfg job`) were 'unrecognized'."""
    def override(token):
        return "=" in token and not token.startswith("-")
    start = next((i for i, token in enumerate(argv) if override(token)), len(argv))
    end = start
    while end < len(argv) and override(argv[end]):
        end += 1
    return argv[:end] + added + argv[end:]


def options(group: str) -> list:
    """The options of a config group (configs/<group>/*.yaml), by name."""
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def as_shipped_fix(framework: str):
    """The fix that runs a registered framework's code as shipped (its contract's), or None for a name that is no
    framework: the config's checks say so, in one line."""
    from train.frameworks.registry import NotAFramework, get

    try:
        return get(framework).as_shipped_fix
    except NotAFramework:
        return None


def a_command_that_runs(scenario: str, framework: str) -> str:
    """For a scenario x framework x fix that is n/a: the nearest command that runs, this framework with another fix
    (its as-shipped one first), else another framework; or "" when none does. Read from configs/ and the
    frameworks' contracts, on the schema's defaults, as Hydra composes them."""
    from train.config import CheckpointConfig, FixConfig, TrainConfig
    from train.frameworks.registry import names
    from train.launch.plan import not_applicable

    scenario_cfg = read_option("scenario", scenario)
    resumes = scenario_cfg.get("workload") == "resume"
    frameworks = list(dict.fromkeys([framework, *([RESUMING_FRAMEWORK] if resumes else []), *names()]))
    checkpoint = {**asdict(CheckpointConfig()), **(scenario_cfg.get("checkpoint") or {})}
    for name in frameworks:
        shipped = as_shipped_fix(name)
        if shipped is None:  # not registered, or its contract is broken: it runs nothing
            continue
        for fix in [shipped, *(f for f in options("fix") if f not in (shipped, "own"))]:
            fix_cfg = {**asdict(FixConfig()), **read_option("fix", fix)}
            cfg = {"fix": fix_cfg, "framework": {"name": name}, "checkpoint": checkpoint,
                   "workload": scenario_cfg.get("workload") or TrainConfig.workload,
                   "needs": scenario_cfg.get("needs") or [], "not_for": scenario_cfg.get("not_for") or {}}
            if not not_applicable(cfg):
                return f"race-lab scenario={scenario} framework={name} fix={fix}"
    return ""
