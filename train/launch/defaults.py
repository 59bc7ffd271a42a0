"""Defaults that run: the command line a user types, with what it leaves out filled in so that it reaches a verdict.

- `framework=lightning` alone runs Lightning as shipped (its `framework.as_shipped_fix`), not the default fix,
  which is fastai's.
- `scenario=crash_mid_save` alone (a scenario of `workload: resume`) runs a framework that resumes: torch_loop,
  with its own as-shipped fix.
Only a single value is filled in from another: a sweep over frameworks (`framework=a,b`) keeps every fix given.
Read before Hydra composes (from configs/), so Hydra sees an ordinary command line.
"""
import re
from pathlib import Path

import yaml
from omegaconf import OmegaConf

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
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
        fix = (read_option("framework", framework).get("framework") or {}).get("as_shipped_fix")
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


def a_command_that_runs(scenario: str, framework: str) -> str:
    """For a scenario x framework x fix that is n/a: the nearest command that runs, this framework with another fix
    (its as-shipped one first), else another framework; or "" when none does. Read from configs/, as Hydra composes
    them (the framework's values, then the scenario's)."""
    from train.launch.plan import not_applicable

    scenario_cfg = read_option("scenario", scenario)
    resumes = scenario_cfg.get("workload") == "resume"
    frameworks = list(dict.fromkeys([framework, *([RESUMING_FRAMEWORK] if resumes else []), *options("framework")]))
    for name in frameworks:
        framework_cfg = read_option("framework", name)
        shipped = (framework_cfg.get("framework") or {}).get("as_shipped_fix")
        for fix in [shipped] + [f for f in options("fix") if f not in (shipped, "own")]:
            fix_cfg = read_option("fix", fix)
            cfg = {"fix": {"name": fix, "workloads": fix_cfg.get("workloads", ["load_best"])},
                   "framework": {"name": name},
                   "workload": scenario_cfg.get("workload") or framework_cfg.get("workload") or "load_best",
                   "not_for": {**(framework_cfg.get("not_for") or {}), **(scenario_cfg.get("not_for") or {})}}
            if fix and not not_applicable(cfg):
                return f"race-lab scenario={scenario} framework={name} fix={fix}"
    return ""
