"""What cannot work is refused in one line with exit 2 before any rank starts, in every framework (issue 24): a key
the run would ignore (each key's `only` in train/config.py, generated from the schema), a checkpoint folder that
cannot be created, a stall that cannot end within the run's time limit, a crash planted past the last epoch.
And what a crash loop does: named the moment two attempts die the same way, and ended there, with restarts left."""
import re
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest

from conftest import processes_tagged
from test_fuzz import preflight_line
from train.config import TrainConfig, lookup

FRAMEWORKS = ["fastai", "lightning", "transformers", "accelerate", "torch_loop"]
RESUMES = "scenario=crash_mid_save"  # a resume scenario every framework but fastai runs


def keys_with_only(schema=TrainConfig, prefix=""):
    for f in fields(schema):
        if is_dataclass(f.type):
            yield from keys_with_only(f.type, prefix + f.name + ".")
        elif f.name != "data" and f.metadata.get("only"):
            yield prefix + f.name, f


ONLY = sorted(keys_with_only())


def a_run_that_reads(only: dict, needs=()) -> list:
    """Overrides for a run that meets every condition of a key's `only`, with a framework that provides one of the
    capabilities it `needs`."""
    from train.frameworks.registry import get, names

    out = [f"framework={next(n for n in names() if needs[0] in get(n).provides)}"] if needs else []
    for other, values in only.items():
        value = values[0]
        if other == "workload":
            out.append(RESUMES if value == "resume" else "scenario=seed")
        elif other.endswith(".name"):
            out.append(f"{other.removesuffix('.name')}={value}")
        else:
            out.append(f"{other}={str(value).lower() if isinstance(value, bool) else value}")
            out += a_run_that_reads(lookup(other).metadata.get("only") or {})  # a key read only by some runs too
    if "framework=" not in " ".join(out) and RESUMES in out:
        out.append("framework=torch_loop")
    if "launch.all_nodes_here=true" in out:
        out += ["nnodes=2", "world_size=2"]
    return out


def a_run_that_ignores(only: dict) -> list:
    """Overrides for a run that misses the first condition of a key's `only`."""
    other, values = next(iter(only.items()))
    if other == "workload":
        return ["scenario=seed"] if "resume" in values else [RESUMES, "framework=torch_loop"]
    if other == "framework.name":
        return ["framework=" + next(f for f in FRAMEWORKS if f not in values)]
    if other == "fix.name":
        return ["fix=barrier"]
    if all(isinstance(v, str) for v in values):
        return []  # a choice that is null by default (fault.async_fault)
    return [] if values == [True] else [f"{other}={str(not values[0]).lower()}"]  # a switch that is off by default


def a_value(key: str, field) -> str:
    meta = field.metadata
    if meta.get("choices"):
        return meta["choices"][-1]
    if key == "fix._target_":
        return "train.frameworks.fastai.callbacks.BarrierSaveModelCallback"
    if field.type is bool:
        return "true"
    return "1"


@pytest.mark.parametrize("key, field", ONLY, ids=[k for k, _ in ONLY])
def test_a_key_set_for_a_run_that_ignores_it_is_refused_naming_it_and_taken_where_it_is_read(key, field, tmp_path):
    only, value = field.metadata["only"], a_value(key, field)
    refused = preflight_line([*a_run_that_ignores(only), f"{key}={value}"], tmp_path / "run")
    assert isinstance(refused, str) and refused.startswith(f"{key}=") and "which ignores it" in refused, refused
    if key == "fix._target_":
        return  # where it is read (fix=own), the class must be one of the framework's kinds: tests/e2e/test_own_class.py
    taken = preflight_line([*a_run_that_reads(only, field.metadata.get("needs", ())), f"{key}={value}"],
                           tmp_path / "run")
    assert not (isinstance(taken, str) and "which ignores it" in taken), taken


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_checkpoint_folder_that_cannot_be_created_is_refused_in_every_framework(framework, tmp_path):
    workload = [RESUMES] if framework != "fastai" and framework != "lightning" else []
    got = preflight_line([f"framework={framework}", *workload, "checkpoint.dir=/proc/race-lab/models"],
                         tmp_path / "run")
    assert got == "checkpoint.dir='/proc/race-lab/models': cannot create or write it (No such file or directory)"
    assert not Path("/proc/race-lab").exists()


def test_the_folder_probe_leaves_nothing_behind(tmp_path):
    folder = tmp_path / "a" / "b" / "models"
    got = preflight_line([f"checkpoint.dir={folder}"], tmp_path / "run")
    assert not isinstance(got, str), got
    assert list(tmp_path.iterdir()) == []  # made, written, and removed again: the run makes it when it starts


@pytest.mark.parametrize("overrides, line", [
    (["skew.seconds=30", "timeout.run_s=10"],
     "skew.seconds=30.0: the stall cannot end within timeout.run_s=10; raise timeout.run_s above it"),
    (["skew.seconds=5", "skew.mid_write_s=5", "timeout.run_s=10"],
     "skew.seconds=5.0: the stall (with skew.mid_write_s, 10 s) cannot end within timeout.run_s=10; "
     "raise timeout.run_s above it"),
    (["scenario=torn", "fault.read_delay_s=12", "timeout.run_s=12"],
     "fault.read_delay_s=12.0: the stall cannot end within timeout.run_s=12; raise timeout.run_s above it"),
    ([RESUMES, "framework=torch_loop", "fault.kill_epoch=3"],
     "fault.kill_epoch=3: the run has epochs=3 (0..2), so the planted crash would never happen"),
    ([RESUMES, "framework=torch_loop", "fault.kill_epoch=1", "fault.kill_at=before_shard"],
     "fault.kill_at=before_shard: only a framework with sharded_state writes a shard on every rank; "
     "framework=torch_loop never gets there, so the planted crash would never happen (mid_write or after_save)"),
    (["scenario=async_top_k", "framework=lightning", "fault.async_fault=in_flight"],
     "fault.async_fault=in_flight: only framework=torch_loop has that point; framework=lightning never gets there, "
     "so the planted fault would never happen"),
    (["scenario=async_in_flight", "framework=torch_loop", "fault.async_fault=slow_write"],
     "fault.async_fault=slow_write: only framework=lightning has that point; framework=torch_loop never gets there, "
     "so the planted fault would never happen"),
], ids=["skew", "skew+mid_write", "read_delay", "kill_epoch", "kill_at", "async_fault-lightning",
        "async_fault-torch_loop"])
def test_limits_that_contradict_each_other_are_refused(overrides, line, tmp_path):
    assert preflight_line(overrides, tmp_path / "run") == line


@pytest.mark.cli
@pytest.mark.parametrize("overrides, starts", [
    (["framework=lightning", "checkpoint.dir=/proc/race-lab/models"], "checkpoint.dir='/proc/race-lab/models': "),
    (["framework=transformers", "fix._target_=train.frameworks.fastai.callbacks.BarrierSaveModelCallback"],
     "fix._target_="),
    (["timeout.collective_s=0.5"], "timeout.collective_s=0.5: must be a finite number >= 1"),
    (["skew.seconds=30", "timeout.run_s=10"], "skew.seconds=30.0: the stall cannot end"),
], ids=["folder", "class-on-a-fix-that-takes-none", "sub-second-collective-timeout", "stall-past-the-run-limit"])
def test_the_command_refuses_in_one_line_with_exit_2_and_leaves_no_run_dir(train, overrides, starts):
    run = train("world_size=2", *overrides)
    assert run.rc == 2, run.err[-2000:]
    assert re.fullmatch(r"error: [^\n]+\n", run.err) and run.err.startswith(f"error: {starts}"), run.err
    assert not run.dir.exists()


@pytest.mark.slow  # real ranks: three attempts of two ranks (about 30 s)
def test_a_crash_loop_with_a_thousand_restarts_is_named_and_ended_within_the_run_limit(train):
    run = train("world_size=2", RESUMES, "framework=torch_loop", "launch.max_restarts=1000", "timeout.run_s=120",
                timeout=200)
    assert run.rc == 0, run.err[-2000:]
    summary = run.summary
    assert summary["verdict"] == "race" and summary["status"] == "crash_loop", summary["explanation"]
    assert summary["explanation"].startswith("race: crash loop: every attempt dies reading epoch1.pt (corrupt); "
                                             "ended after 3 attempts"), summary["explanation"]
    assert summary["resume"]["crash_loop"]["attempts"] == [1, 2]
    named = next(e for e in run.events if e["event"] == "crash_loop")
    second_death = min(e["t"] for e in run.events if e["event"] == "load_error" and e.get("attempt") == 2)
    ended = next(e for e in run.events if e["event"] == "launch_end")
    # named at the second death and ended there, not by a timeout: about 0.2 s and 1 s on an idle machine, 2.6 s
    # once in CI's full run on 2 loaded cores; the bound tells that from timeout.run_s (how fast: make bench)
    assert named["t"] - second_death < 10 and ended["t"] - named["t"] < 10, (second_death, named, ended)
    # ended at the agent's restart after the second death: no attempt begins once the loop is certain
    assert max(e.get("attempt", 0) for e in run.events) == 2
    launcher_lines = [line for line in (run.out + run.err).splitlines() if not line.startswith("[rank ")]
    assert len(launcher_lines) <= 15, launcher_lines  # the header, the table, the verdict: no torch warnings
    assert not any("Traceback" in line or "SIGTERM" in line for line in launcher_lines), launcher_lines
    assert processes_tagged(str(run.dir)) == []


@pytest.mark.slow  # real ranks, restarting until the run's time limit (about 20 s)
def test_the_run_limit_holds_across_restarts(train):
    """timeout.run_s bounds the whole run: the stop reaches torch elastic's agent even while it restarts the
    group (a SIGTERM that lands in its log tailers' stop is swallowed there; the launcher sends it again)."""
    run = train("world_size=2", RESUMES, "framework=torch_loop", "launch.max_restarts=1000", "timeout.run_s=8",
                timeout=200)
    assert run.rc == 0, run.err[-2000:]
    # the limit comes first, or on a fast machine the crash loop is certain before it (then named, as above)
    assert run.summary["status"] in ("timeout", "crash_loop"), run.summary["explanation"]
    started = next(e["t"] for e in run.events if e["event"] == "launch_start")
    ended = next(e["t"] for e in run.events if e["event"] == "launch_end")
    assert ended - started < 8 + 10, ended - started  # the limit, and the agent's shutdown; before: 180 s and more
    assert processes_tagged(str(run.dir)) == []
