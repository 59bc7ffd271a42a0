"""The framework contract (train/frameworks/base.py) and its registry (registry.py): a contract is read without
importing its framework, a broken declaration is named in one line, and what a framework lacks decides n/a with its
own words. No ranks."""

import json
import subprocess
import sys

import pytest

from train.frameworks.base import CAPABILITIES, Framework
from train.frameworks.registry import NotAFramework, get, names

LIBRARIES = ("torch", "fastai", "pytorch_lightning", "lightning", "transformers", "accelerate", "deepspeed", "ray")


def test_every_contract_loads_without_importing_its_framework_or_torch():
    probe = (
        "import json, sys\nfrom train.frameworks.registry import get, names\n"
        "for name in names(): get(name).modules()\n"
        f"print(json.dumps([m for m in {list(LIBRARIES)!r} if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == []


class Sound(Framework):
    name = "sound"
    distribution = "sound"
    workloads = {"load_best": "sound.adapter:fit_and_load"}
    as_shipped_fix = "as_shipped"
    fixes = {"load_best": frozenset({"as_shipped", "barrier"})}
    no_fix = {"poll": "waiting for the file adds nothing here"}
    provides = frozenset({"load_guard"})
    lacks = {"pointer": "it keeps no pointer"}


def test_a_sound_contract_has_no_problems_and_derives_its_lines():
    assert Sound.problems() == []
    assert Sound.modules() == ["sound.adapter"]
    assert Sound.why_lacking("load_best") is None and Sound.why_lacking("load_guard") is None
    assert Sound.why_lacking("pointer") == "it keeps no pointer"
    assert Sound.why_lacking("resume") == "sound has no resume workload"
    assert Sound.why_lacking("listing") == f"sound has no {CAPABILITIES['listing']}"
    assert Sound.why_no_fix("barrier", "load_best") is None
    assert Sound.why_no_fix("poll", "load_best") == "waiting for the file adds nothing here"
    assert Sound.why_no_fix("dcp", "load_best") == "framework=sound has no way to do fix=dcp for workload=load_best"


@pytest.mark.parametrize(
    "changes, problem",
    [
        ({"workloads": {"train": "m:f"}}, "sound: unknown workload 'train'"),
        ({"provides": frozenset({"teleport"})}, "sound: unknown capability 'teleport'"),
        ({"lacks": {"load_guard": "why"}}, "sound: lacks 'load_guard' it provides"),
        ({"workloads": {"load_best": "module.function"}}, "sound: 'module.function' is not module:function"),
        ({"as_shipped_fix": "atomic"}, "sound: its as_shipped_fix 'atomic' is in none of its fixes"),
        ({"own_lacks": {"teleport": "why"}}, "sound: unknown capability 'teleport' in own_lacks"),
    ],
)
def test_a_broken_declaration_is_named(changes, problem):
    assert problem in type("Broken", (Sound,), changes).problems()


def test_a_contract_that_declares_nothing_says_what_it_lacks():
    assert type("Empty", (Framework,), {}).problems()[0] == "Empty declares no name"


def test_a_name_no_framework_is_registered_under_is_one_line_naming_those_that_are():
    with pytest.raises(NotAFramework) as e:
        get("nope")
    assert str(e.value).startswith("framework=nope: none is registered under the entry points 'race_lab.frameworks'")
    assert all(name in str(e.value) for name in names())


def test_race_labs_own_frameworks_are_found_from_a_checkout_not_installed_as_a_package(monkeypatch):
    """The container image runs python -m train from /app, not pip-installed: no entry points in any installed
    distribution, race-lab's pyproject.toml registers its own."""
    from train.frameworks import registry

    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    registry.frameworks.cache_clear()
    try:
        assert {"fastai", "lightning", "transformers", "accelerate", "torch_loop", "deepspeed", "ray_train"} == set(
            registry.names()
        )
        assert registry.frameworks()["fastai"].value == "train.frameworks.fastai:Fastai"
    finally:
        registry.frameworks.cache_clear()
