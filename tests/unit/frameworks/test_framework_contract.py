"""The framework contract (train/frameworks/base.py) and its registry (registry.py): a contract is read without
importing its framework, a broken declaration is named in one line, and what a framework lacks decides n/a with its
own words. No ranks."""

import json
import subprocess
import sys

import pytest

from train.frameworks.base import CAPABILITIES, FOLDER, Framework, OwnBase
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
    assert Sound.why_lacking("listing") == f"sound provides no listing, {CAPABILITIES['listing']}"
    assert Sound.why_no_fix("barrier", "load_best") is None
    assert Sound.why_no_fix("poll", "load_best") == "waiting for the file adds nothing here"
    assert Sound.why_no_fix("dcp", "load_best") == "framework=sound has no way to do fix=dcp for workload=load_best"
    assert Sound.why_no_fix("barrier", "resume") == "framework=sound has no way to do fix=barrier for workload=resume"


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
    from importlib.metadata import EntryPoint

    from train.frameworks import registry

    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    registry.frameworks.cache_clear()
    try:
        assert {"fastai", "lightning", "transformers", "accelerate", "torch_loop", "deepspeed", "ray_train"} == set(
            registry.names()
        )
        assert registry.frameworks()["fastai"] == EntryPoint("fastai", "train.frameworks.fastai:Fastai", registry.GROUP)
    finally:
        registry.frameworks.cache_clear()


def test_a_rank_runs_a_workload_by_the_function_its_contract_names():
    runs_json = type("RunsJson", (Sound,), {"workloads": {"load_best": "json:dumps"}})
    assert runs_json.entry("load_best") is __import__("json").dumps
    assert runs_json().run("load_best", {"rank": 1}) == '{"rank": 1}'


def test_a_base_of_yours_is_named_by_its_class_or_the_methods_it_must_have_and_built_as_each_workload_builds_it():
    callback = OwnBase(
        "fastai.callback.tracker.SaveModelCallback",
        keywords=("fname",),
        built_with={"fname": "m"},
        keywords_in={"resume": {"every_n_epochs": 1, "dirpath": FOLDER}},
    )
    assert callback.kind() == "fastai.callback.tracker.SaveModelCallback"
    assert callback.given_in("load_best") == (("fname",), {"fname": "m"})
    assert callback.given_in("resume") == (("every_n_epochs", "dirpath"), {"every_n_epochs": 1, "dirpath": FOLDER})
    copied = OwnBase("train.fixes.Saver", methods={"save": ("epoch", "state"), "resume": ()})
    assert copied.kind() == "a class with Saver's methods save(epoch, state), resume()"
    assert OwnBase(None, methods={"load": ("path",)}).kind() == "a class with load(path)"
    assert OwnBase(None).kind() == ""


@pytest.fixture
def registered(monkeypatch):
    """registered(value): the registry as if one more package registered `value` as framework=theirs."""
    from importlib.metadata import EntryPoint

    from train.frameworks import registry

    def register(value):
        points = {"theirs": EntryPoint("theirs", value, registry.GROUP)}
        monkeypatch.setattr(registry, "frameworks", lambda: points)
        registry.get.cache_clear()

    yield register
    registry.get.cache_clear()


class Theirs(Sound):
    name = "theirs"


class Misnamed(Sound):
    name = "other"


class Broken(Sound):
    name = "theirs"
    provides = frozenset({"teleport"})


@pytest.mark.parametrize(
    "value, line",
    [
        (
            "no_such_package.race_lab:InHouse",
            "framework=theirs: its entry point no_such_package.race_lab:InHouse does "
            "not load (ModuleNotFoundError: No module named 'no_such_package')",
        ),
        (
            "json:dumps",
            "framework=theirs: its entry point json:dumps is no subclass of train.frameworks.base.Framework",
        ),
        (f"{__name__}:Misnamed", "framework=theirs: it is registered as 'theirs' but names itself 'other'"),
        (f"{__name__}:Broken", "framework=theirs: theirs: unknown capability 'teleport'"),
    ],
)
def test_a_registered_framework_that_cannot_be_run_is_one_line_saying_why(registered, value, line):
    registered(value)
    with pytest.raises(NotAFramework) as e:
        get("theirs")
    assert str(e.value) == line


def test_a_registered_framework_that_keeps_the_contract_is_found(registered):
    registered(f"{__name__}:Theirs")
    assert get("theirs") is Theirs


def test_a_checkout_whose_pyproject_cannot_be_read_registers_nothing_of_its_own(monkeypatch, tmp_path):
    from train.frameworks import registry

    monkeypatch.setattr(registry, "PYPROJECT", tmp_path / "pyproject.toml")
    assert registry.own_entry_points() == []
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert registry.own_entry_points() == []
    (tmp_path / "pyproject.toml").write_text("[project\n")
    assert registry.own_entry_points() == []
