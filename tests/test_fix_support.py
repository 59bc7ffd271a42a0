"""Which fix a framework does is said in one place, the not_for of configs/framework/*.yaml (launch/plan.py's
not_applicable, before any rank starts): every adapter's dispatch (BY_FIX, read by train.frameworks.fix_way) has a
way for a fix exactly when its cell is not n/a, so that no rank meets a fix its adapter cannot do. No ranks: it
composes the configs with Hydra and imports each framework once."""
import functools

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import ROOT
from train.frameworks import ENTRY, adapter_functions, fix_way
from train.launch.plan import not_applicable

FRAMEWORKS = sorted(p.stem for p in (ROOT / "configs" / "framework").glob("*.yaml"))
FIXES = sorted(p.stem for p in (ROOT / "configs" / "fix").glob("*.yaml"))  # `own` too
SCENARIOS = sorted(p.stem for p in (ROOT / "configs" / "scenario").glob("*.yaml"))


@functools.lru_cache(maxsize=None)
def composed(*overrides) -> dict:
    """The config `python -m train` would run, as plain data (treat it as read-only: it is cached)."""
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=False)


def workloads(framework: str) -> list:
    """The workloads the framework's adapter has (read from its source, as the launcher's checks do)."""
    defined = adapter_functions(composed(f"framework={framework}")["framework"]["adapter"])
    return [workload for workload, function in ENTRY.items() if function in defined]


CASES = [(framework, workload) for framework in FRAMEWORKS for workload in workloads(framework)]


@functools.lru_cache(maxsize=None)
def neutral_scenario(workload: str) -> str:
    """A scenario of this workload whose own not_for names no fix and no framework that has the workload: its
    cells are n/a by the framework's not_for or the fix's workloads alone."""
    having = {framework for framework, w in CASES if w == workload}
    for scenario in SCENARIOS:
        own = OmegaConf.load(ROOT / "configs" / "scenario" / f"{scenario}.yaml").get("not_for", {})  # its own lines
        if composed(f"scenario={scenario}")["workload"] == workload and not set(own) & (set(FIXES) | having):
            return scenario
    raise AssertionError(f"no scenario of workload={workload} leaves every fix and framework to the framework")


def test_every_framework_has_a_workload_and_every_workload_a_neutral_scenario():
    assert {framework for framework, _ in CASES} == set(FRAMEWORKS)
    for workload in {w for _, w in CASES}:
        neutral_scenario(workload)


@pytest.mark.parametrize("framework, workload", CASES)
def test_the_adapter_has_a_way_for_a_fix_exactly_when_its_cell_is_not_n_a(framework, workload):
    scenario, wrong = neutral_scenario(workload), []
    for fix in FIXES:
        cfg = composed(f"framework={framework}", f"scenario={scenario}", f"fix={fix}")
        assert cfg["workload"] == workload
        if fix == "own":  # a class of yours, named on the command line (fix._target_=...)
            cfg = {**cfg, "fix": {**cfg["fix"], "_target_": "yours.YourCheckpoint"}}
        reason, way = not_applicable(cfg), fix_way(cfg)
        if (way is None) != (reason is not None):
            wrong.append(f"fix={fix}: " + (f"n/a ({reason}), yet the adapter does it" if reason else
                                                "not n/a, yet the adapter has no way to do it: add a not_for line"))
    assert not wrong, f"framework={framework} workload={workload}:\n  " + "\n  ".join(wrong)
