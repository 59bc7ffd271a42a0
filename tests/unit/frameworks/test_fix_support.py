"""The framework contract (train/frameworks/base.py) and the code behind it agree: every fix a framework's contract
names for a workload is one its workload module's dispatch (BY_FIX, or ASYNC_FIXES for an async save's fixes) has a
way to do, and the reverse, so that no rank meets a fix its adapter cannot do and no way is left unreachable; and
every framework's n/a line for a fix it lacks comes from the contract. No ranks: it imports each framework once."""

import importlib

import pytest

from conftest import ROOT
from train.frameworks import registry
from train.frameworks.base import CAPABILITIES, CLASS_NAMED, WORKLOADS

FIXES = sorted(p.stem for p in (ROOT / "configs" / "fix").glob("*.yaml"))
CASES = [(name, workload) for name in registry.names() for workload in registry.get(name).workloads]


def ways(framework, workload: str) -> set:
    """The fixes the workload's module has a way to do: its BY_FIX, and its ASYNC_FIXES where it has an async save.
    A BY_FIX that is CLASS_NAMED does each fix as the class fix._target_ names (fastai): every fix whose config
    names a class, and own."""
    module = importlib.import_module(framework.workloads[workload].partition(":")[0])
    module = getattr(module, "WORKLOAD_MODULES", {}).get(workload, module)  # an entry that picks the module to run
    if module.BY_FIX is CLASS_NAMED:
        from omegaconf import OmegaConf

        named = {fix for fix in FIXES if OmegaConf.load(ROOT / "configs" / "fix" / f"{fix}.yaml").get("_target_")}
        return named | {"own"}
    return set(module.BY_FIX) | set(getattr(module, "ASYNC_FIXES", {}))


def test_race_labs_own_frameworks_are_registered_and_sound():
    assert {"fastai", "lightning", "transformers", "accelerate", "torch_loop", "deepspeed"} <= set(registry.names())
    for name in registry.names():
        framework = registry.get(name)
        assert framework.problems() == [], name
        assert set(framework.provides) <= set(CAPABILITIES) and set(framework.workloads) <= set(WORKLOADS)


@pytest.mark.parametrize("name, workload", CASES)
def test_the_contract_names_exactly_the_fixes_its_workload_module_does(name, workload):
    framework = registry.get(name)
    declared, done = set(framework.fixes[workload]), ways(framework, workload)
    assert declared - done == set(), f"{name} {workload}: the contract names fixes no way does"
    assert done - declared == set(), f"{name} {workload}: ways the contract does not name (unreachable)"
    assert set(FIXES) >= declared


def test_a_fix_the_framework_lacks_is_n_a_with_its_why_or_a_derived_line():
    lightning = registry.get("lightning")
    assert lightning.why_no_fix("as_shipped", "load_best") is None
    assert "fsspec transaction" in lightning.why_no_fix("atomic", "load_best")
    transformers = registry.get("transformers")
    assert transformers.why_no_fix("atomic", "resume") is None  # load_best/atomic is for one workload only
    assert "half-written" in transformers.why_no_fix("atomic", "load_best")
    assert registry.get("torch_loop").why_no_fix("wait_for_everyone", "resume") == (
        "framework=torch_loop has no way to do fix=wait_for_everyone for workload=resume"
    )


def test_a_capability_the_framework_lacks_is_said_in_its_line_or_a_derived_one():
    fastai = registry.get("fastai")
    assert fastai.why_lacking("load_best") is None and fastai.why_lacking("load_guard") is None
    assert "no resume path" in fastai.why_lacking("resume")
    assert fastai.why_lacking("sharded_state") == f"fastai provides no sharded_state, {CAPABILITIES['sharded_state']}"
