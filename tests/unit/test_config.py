"""Bad configs are rejected with one line before any rank starts; device/backend choice; the schema
is the one source of every key, and README's table is made from it."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from helpers.compose import base_cfg, composed
from train.config import ConfigError, markdown_table
from train.launch.plan import Machine, make_plan, n_a_line, not_applicable

LAPTOP = Machine(cpus=2, gpus=0, memory_mib=16_000, open_files=1024)


@pytest.mark.parametrize("overrides, reason", [
    (["scenario=seed", "fix=barrier"], None),
    (["scenario=crash_mid_save", "framework=torch_loop", "fix=atomic"], None),  # atomic: both workloads
    (["scenario=disagree", "fix=dcp", "framework=lightning"], "DDPStrategy saves through a CheckpointIO"),
    (["scenario=seed", "fix=atomic", "framework=transformers"], "the Trainer reads only after the barrier"),
    (["scenario=crash_mid_save", "fix=atomic", "framework=transformers"], None),  # load_best/atomic only
    (["scenario=crash_mid_save", "fix=atomic"], "needs resume; fastai has none: fastai's SaveModelCallback keeps "
     "the best"),  # the scenario's workload, which the framework's contract lacks, with its why
    (["scenario=pointer_first", "framework=accelerate", "fix=atomic"], "needs pointer; accelerate has none: "
     "Accelerate has no pointer"),  # a capability the scenario needs (needs:), which the framework lacks
    (["scenario=crash_mid_save", "framework=torch_loop", "fix=rank0_rotates"], "fix=rank0_rotates needs old "
     "checkpoints deleted (nothing rotates here: checkpoint.keep_last=0)"),  # what the fix needs of the scenario
    (["scenario=async_in_flight", "framework=torch_loop", "fix=atomic"], "fix=atomic needs synchronous saves"),
    (["scenario=async_in_flight", "framework=torch_loop", "fix=fresh_rename"], "no folder is saved over here"),
    (["scenario=crash_mid_save", "framework=torch_loop", "fix=as_shipped"], "there is no framework to ship one"),
    (["scenario=crash_mid_save", "framework=deepspeed", "fix=poll"], "a fix of the load of the best"),
    (["scenario=crash_mid_save", "framework=deepspeed", "fix=on_durable"], "fix=on_durable needs an async save"),
    (["scenario=crash_mid_save", "framework=torch_loop", "fix=barrier"], "a fix of the load of the best at "
     "the end (workload=load_best); this run's is the resume after a restart (workload=resume)"),
    (["scenario=seed", "fix=manifest"], "a fix of the resume after a restart (workload=resume); this run's is "
     "the load of the best at the end (workload=load_best)"),
    (["scenario=async_in_flight", "framework=torch_loop", "fix=own"], None),  # a class of yours runs it (own_async.py)
    (["scenario=async_in_flight", "framework=torch_loop", "fix=durable"], None),  # a built-in fix still runs it
    (["scenario=node_local_resume", "framework=ray_train", "fix=as_shipped"], "needs 2 nodes; ray_train starts "
     "its own workers from one driver"),  # own_workers: one node
    (["scenario=crash_mid_save", "framework=ray_train", "fix=as_shipped"], None),  # own_workers on its one node
])
def test_a_cell_is_n_a_by_the_scenario_s_needs_the_fix_s_and_the_framework_s_contract(overrides, reason):
    got = not_applicable(composed(*overrides))
    assert got == reason if reason is None else got.startswith(reason), got


def test_a_capability_a_contract_says_a_class_of_yours_cannot_run_makes_its_scenarios_n_a_for_fix_own(monkeypatch):
    """own_lacks (base.py), which a framework package of a team's may declare; race-lab's own frameworks run a class
    of yours wherever their fixes run."""
    from train.frameworks import registry

    monkeypatch.setattr(registry.get("torch_loop"), "own_lacks", {"dcp_async_save": "its faults sit in its saver"})
    assert not_applicable(composed("scenario=async_in_flight", "framework=torch_loop", "fix=own")) == \
        "needs dcp_async_save; a class of yours cannot run it in torch_loop: its faults sit in its saver"
    assert not_applicable(composed("scenario=async_in_flight", "framework=torch_loop", "fix=durable")) is None


def test_an_n_a_line_names_the_cell_and_its_framework_but_fastai():
    assert n_a_line("torn", composed("scenario=torn", "fix=dcp"), "why") == "scenario=torn fix=dcp: n/a: why"
    assert n_a_line("seed", composed("framework=lightning", "fix=dcp"), "why") == \
        "scenario=seed fix=dcp framework=lightning: n/a: why"


def test_a_name_is_one_file_or_folder_name_up_to_200_characters():
    from train.launch.plan import is_name

    assert is_name("best") and is_name("x" * 200) and is_name("...") and is_name("ünï a-b.c")
    assert not any(is_name(v) for v in ("", ".", "..", "a/b", "/", "a\0", "x" * 201, None, 3, b"best"))


def test_auto_picks_cpu_gloo_without_enough_gpus_and_nccl_with():
    plan = make_plan(base_cfg(), Machine(cpus=2, gpus=2, memory_mib=16_000, open_files=1024))
    assert (plan.device, plan.backend) == ("cpu", "gloo")
    assert "2 GPU(s) visible for 3 rank(s)" in plan.reason
    plan = make_plan(base_cfg(), Machine(cpus=2, gpus=3, memory_mib=16_000, open_files=1024))
    assert (plan.device, plan.backend) == ("cuda", "nccl")


# Values that Hydra's structured config lets through (right type) but that are out of range, or wrong
# together; each group of the config is covered.
@pytest.mark.parametrize("changes, message", [
    ({"world_size": 0}, "world_size=0: must be an integer >= 1"),
    ({"epochs": -2}, "epochs=-2: must be an integer >= 1"),
    ({"lr": float("inf")}, "lr=inf: must be a finite number > 0"),
    ({"lr": float("nan")}, "lr=nan: must be a finite number > 0"),
    ({"expect": "maybe"}, "expect='maybe': must be null or one of clean, race, save_failed, error"),
    ({"skew.rank": 3}, "skew.rank=3: must be a rank in 0..2 (world_size=3)"),
    ({"skew.seconds": -1.0}, "skew.seconds=-1.0: must be a finite number >= 0"),
    ({"skew.mid_write_s": float("nan")}, "skew.mid_write_s=nan: must be a finite number >= 0"),
    ({"fault.crash_rank": 7}, "fault.crash_rank=7: must be null or a rank in 0..2"),
    ({"fault.save_error": "ENOENT"}, "fault.save_error='ENOENT': must be null or one of ENOSPC, EIO, EROFS"),
    ({"fault.best_epoch": 3}, "fault.best_epoch=3: must be null, -1 or an epoch in 0..2 (epochs=3)"),
    ({"fault.read_delay_s": -0.5}, "fault.read_delay_s=-0.5: must be a finite number >= 0"),
    ({"checkpoint.guard": "always"}, "checkpoint.guard='always': must be one of none, load, sync"),
    ({"timeout.collective_s": 0}, "timeout.collective_s=0: must be a finite number >= 1 and <= 86400"),
    ({"timeout.collective_s": 0.5}, "timeout.collective_s=0.5: must be a finite number >= 1 and <= 86400"),  # torch's rendezvous: whole seconds
    ({"timeout.run_s": float("inf")}, "timeout.run_s=inf: must be a finite number > 0"),
    ({"launch.start_method": "fork"}, "launch.start_method='fork': must be one of forkserver, spawn"),
    ({"data.batch_size": 0}, "data.batch_size=0: must be an integer >= 1"),
    ({"data.valid_pct": 1.5}, "data.valid_pct=1.5: must be a finite number > 0 and <= 0.9"),
    ({"data.classes": [3, 12]}, "data.classes=[3, 12]: must be a list of integers >= 0 and <= 9"),
    ({"data.classes": [3, 3]}, "data.classes=[3, 3]: must be two different digits"),
    ({"nnodes": 2, "node_rank": 2}, "node_rank=2: must be a node in 0..1 (nnodes=2)"),
    ({"nnodes": 2}, "world_size=3: must be a multiple of nnodes=2 (the same ranks on each node)"),
    ({"nnodes": 3}, "rdzv.endpoint='localhost:0': with nnodes=3 every node needs the same HOST:PORT"),
    ({"nnodes": 3, "rdzv.endpoint": "10.0.0.1:29500"}, "rdzv.id='auto': with nnodes=3 give every node the same id"),
    ({"rdzv.endpoint": "nohost"}, "rdzv.endpoint='nohost': must be HOST:PORT"),
    # names that become part of a file or folder name: never a path (found by tests/e2e/test_fuzz.py)
    *[({key: value}, f"{key}={value!r}: must be a name, not a path: 1 to 200 characters, no '/' or NUL, not '.' or "
                     "'..'") for key, value in (("checkpoint.name", "../x"), ("checkpoint.name", ""),
                                                ("checkpoint.name", "."), ("fix.name", ".."),
                                                ("framework.name", "a\0b"), ("rdzv.id", "a/b"),
                                                ("checkpoint.name", "x" * 201))],
    ({"framework.name": "nope"}, "framework=nope: none is registered under the entry points "
     "'race_lab.frameworks' (these are: "),
    ({"workload": "resume"}, "workload='resume': framework=fastai has no resume path: fastai's SaveModelCallback "
     "keeps the best and loads it at the end"),
    ({"framework.name": "torch_loop"}, "workload='load_best': framework=torch_loop has no load_best path: the loop "
     "resumes only"),
    ({"needs": ["teleport"]}, "needs=['teleport']: each must be one of load_guard, rank_read_at_save, pointer"),
    ({"framework.name": "lightning", "data": {
        "name": "mnist_sample", "url": "u", "cache": "c", "batch_size": 64}},
     "data='mnist_sample': framework=lightning trains on data=digits only"),
])
def test_plan_rejects_bad_values_naming_key_and_value(changes, message):
    with pytest.raises(ConfigError) as e:
        make_plan(base_cfg(**changes), LAPTOP)
    assert str(e.value) == message or str(e.value).startswith(message)


@pytest.mark.parametrize("changes, machine, message", [
    ({"backend": "nccl"}, Machine(2, 2, 16_000, 1024), "backend='nccl': needs one GPU per rank: 3 ranks, 2 GPU(s)"),
    ({"device": "cuda"}, LAPTOP, "device='cuda': needs one GPU per rank: 3 ranks, 0 GPU(s) visible"),
    ({"device": "cpu", "backend": "nccl"}, Machine(2, 4, 16_000, 1024), "backend='nccl': needs device=cuda"),
    ({"world_size": 200}, LAPTOP, "world_size=200: more than 4 CPU ranks per core: this machine has 2 core(s), "
                                  "so at most 8; launch.oversubscribe=true allows more"),
    ({"world_size": 200, "launch.oversubscribe": True}, Machine(2, 0, 500_000, 1024),
     "world_size=200: needs about 3264 open files, the limit is 1024 (ulimit -n)"),
    ({"world_size": 8}, Machine(2, 0, 2_000, 1024), "world_size=8: needs about 4800 MiB for its ranks, 2000 MiB"),
])
def test_plan_refuses_what_the_machine_cannot_hold(changes, machine, message):
    with pytest.raises(ConfigError) as e:
        make_plan(base_cfg(**changes), machine)
    assert str(e.value).startswith(message)


def test_more_cpu_ranks_than_cores_run_with_a_note_saying_so():
    assert make_plan(base_cfg(world_size=2), LAPTOP).note == ""
    assert make_plan(base_cfg(world_size=8), LAPTOP).note == (
        "world_size=8: 8 CPU ranks on 2 core(s): runs will be slower, and a hang is named later, than with a core for "
        "each rank")
    assert make_plan(base_cfg(world_size=4), Machine(2, 4, 16_000, 1024)).note == ""  # a GPU each: no CPU ranks


def test_every_scenario_composes_and_passes_the_checks():
    scenarios = sorted(p.stem for p in (ROOT / "configs/scenario").glob("*.yaml"))
    assert {"seed", "stale", "torn", "skip_if_missing", "disagree", "save_fails", "many_writers"} <= set(scenarios)
    for name in scenarios:  # a resume scenario with the framework-free resume loop (fastai has no resume path)
        resumes = composed(f"scenario={name}")["workload"] == "resume"
        make_plan(composed(f"scenario={name}", *(["framework=torch_loop"] if resumes else [])), LAPTOP)
        header = (ROOT / f"configs/scenario/{name}.yaml").read_text().splitlines()
        assert header[0] == "# @package _global_"
        assert "#" in header[1] and any(c.isdigit() for c in " ".join(header[1:4])), f"{name}: cite its report"


def test_the_seed_scenario_is_the_schemas_defaults():
    assert composed() == composed("scenario=seed")
    cfg = composed()
    assert (cfg["world_size"], cfg["epochs"], cfg["skew"]) == (3, 3, {"rank": 0, "seconds": 3.0, "end_when_settled": False,
                                                           "mid_write_s": 0.0})


def cli(tmp_path, *overrides, env=None):
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "train", f"hydra.run.dir={run_dir}", *overrides],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
    return proc, run_dir



def options(group: str) -> str:
    """A config group's options as Hydra lists them: every file in configs/<group>/, sorted."""
    return ", ".join(sorted(p.stem for p in (ROOT / "configs" / group).glob("*.yaml")))

def refusal(*overrides):
    """The line `python -m train` prints for these overrides before any rank starts, worked out in this process by
    the functions the command line calls, in its order: Hydra's composition (its errors through
    config_error_line, as train/__main__.py turns them into one line), then train/launch/job.py's check, n/a
    and preflight (on this machine; the data not fetched). None: it would run. The few command lines below
    (test_cli_*) show that the real process prints these very lines and exits 2."""
    from train.config import check
    from train.launch.hydra_errors import config_error_line
    from train.launch.plan import this_machine
    from train.launch.preflight import preflight

    try:
        cfg = composed(*overrides)
    except Exception as e:
        line = config_error_line(e)
        if line is None:
            raise
        return f"error: {line}"
    try:
        check(cfg)
        reason = not_applicable(cfg)
        if reason:
            return f"n/a: {reason}"
        preflight(cfg, this_machine(), reach_data=False)
    except ConfigError as e:
        return f"error: {e}"
    return None


# What the command line refuses, each kind of wrong value: a Hydra type error, a key that is not there, a
# group set as a value, an option that is not there (each group), a value out of range, a machine that
# cannot hold the run. Each one in this process (refusal); one of each path through the real process below.
REFUSED = [
    ("world_size=0", "error: world_size=0: must be an integer >= 1"),
    ("world_size=abc", "error: world_size=abc: must be an integer >= 1"),
    ("skew.rank=5", "error: skew.rank=5: must be a rank in 0..2 (world_size=3)"),
    ("skew.seconds=-1", "error: skew.seconds=-1.0: must be a finite number >= 0"),
    ("skew.seconds=nan", "error: skew.seconds=nan: must be a finite number >= 0"),
    ("data.batch_size=x", "error: data.batch_size=x: must be an integer >= 1"),
    ("fault.save_error=ENOENT", "error: fault.save_error='ENOENT': must be null or one of ENOSPC, EIO, EROFS"),
    ("nosuchkey=1", "error: nosuchkey: not a key of this config (python -m train.config lists them)"),
    ("skew=3", "error: skew=3: skew is a group of keys; set them one by one"),
    ("reproduces={fastai: [[x]]}", "error: reproduces={'fastai': [['x']]}: must be a mapping to lists of strings"),
    ("fix=nope", "error: fix=nope: no such option; one of " + options("fix")),
    ("scenario=nope", "error: scenario=nope: no such option; one of " + options("scenario")),
    ("framework=nope", "error: framework=nope: no such option; one of " + options("framework")),
    ("+fix.kwargs.wait_s=5", "error: fix.kwargs={'wait_s': 5}: only for fix=own (your class's constructor); "
                             "fix=unsynced takes none"),
    ("backend=nccl", "error: backend='nccl': needs one GPU per rank: 3 ranks, 0 GPU(s) visible"),
    ("world_size=200", "error: world_size=200: more than 4 CPU ranks per core: this machine has 2 core(s), so at "
                       "most 8; launch.oversubscribe=true allows more"),
]


def on_this_machine(expected: str) -> str:
    if "cores" in expected and os.cpu_count() != 2:
        return expected.split(":")[0] + ": more than 4 CPU ranks per core"
    return expected


@pytest.mark.parametrize("override, expected", REFUSED, ids=[o for o, _ in REFUSED])
def test_a_bad_config_is_refused_with_one_line(override, expected):
    line = refusal(override)
    assert line is not None and "\n" not in line, line
    assert line.startswith(on_this_machine(expected)), line


def test_a_good_config_is_not_refused():
    assert refusal() is None and refusal("world_size=2", "fix=barrier") is None


# The real process for one refusal of each path (the rest: test_a_bad_config_is_refused_with_one_line): an
# exception out of Hydra's composition, turned into one line by train/__main__.py (fix=nope; world_size=abc,
# nosuchkey=1 and skew=3 take the same path), and a ConfigError of the checks, refused by train/launch/job.py
# (skew.rank=5; the machine's checks take the same path).
@pytest.mark.cli
@pytest.mark.parametrize("override, expected", [(o, e) for o, e in REFUSED if o in ("fix=nope", "skew.rank=5")])
def test_cli_rejects_bad_config_with_one_line_before_any_rank(tmp_path, override, expected):
    expected = on_this_machine(expected)
    proc, run_dir = cli(tmp_path, override)
    assert proc.returncode == 2, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(expected)
    assert not run_dir.exists(), "nothing may be left where a result would be"


@pytest.mark.cli
def test_a_combination_that_makes_no_sense_is_refused_with_its_reason(tmp_path):
    proc, run_dir = cli(tmp_path, "scenario=torn", "fix=dcp")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: scenario=torn fix=dcp: n/a: torch.distributed.checkpoint writes its own files; the stall is "
        "placed in the torch.save path; this runs: race-lab scenario=torn framework=fastai fix=barrier"]
    assert not run_dir.exists()


@pytest.mark.cli
def test_a_run_dir_that_cannot_be_made_gets_one_line_and_exit_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # a run dir below a file cannot be made, whoever runs the test
    proc, _ = cli(tmp_path, f"hydra.run.dir={blocker / 'run'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [f"error: hydra.run.dir: cannot write {blocker / 'run'}: "
                                                "Not a directory"]


@pytest.mark.cli
def test_data_that_cannot_be_downloaded_fails_with_one_line_before_any_rank(tmp_path):
    url = "http://127.0.0.1:9/mnist_sample.tgz"  # loopback, nothing listens: the download cannot happen
    proc, run_dir = cli(tmp_path, "data=mnist_sample", f"data.url={url}", f"data.cache={tmp_path / 'no-cache'}")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: data.url='{url}': cannot download mnist_sample (")
    assert line.endswith("data=digits works offline")
    assert not run_dir.exists()


def test_key_reference_is_the_schemas():
    keys = (ROOT / "docs" / "keys.md").read_text()
    assert markdown_table() in keys, "docs/keys.md's table is stale: paste `python -m train.config` into it"


@pytest.mark.cli
def test_python_m_train_config_prints_the_table():
    out = subprocess.run([sys.executable, "-m", "train.config"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout == markdown_table()
    assert "| `fault.save_error` | null |" in out.stdout and "| `data.batch_size` | 16 |" in out.stdout


def test_the_tables_default_column_says_each_kind_of_default():
    from dataclasses import dataclass, field, fields

    from train.config import _default_text

    @dataclass
    class Kinds:
        group: int
        null: str = None
        flag: bool = False
        text: str = "best"
        number: float = 0.5
        items: list = field(default_factory=lambda: [3, 7])

    assert [_default_text(f) for f in fields(Kinds)] == ["(group)", "null", "false", "`best`", "0.5", "[3, 7]"]


def test_n_a_by_workload_names_each_workload_in_words_and_an_unknown_one_by_its_value():
    """not_applicable runs before the checks (the launcher asks it first), so it says what it was given."""
    def cfg(workloads, workload):
        return {"fix": {"name": "fix", "workloads": workloads}, "framework": {"name": "transformers"},
                "workload": workload, "not_for": {}}

    assert not_applicable(cfg(["load_best", "other"], "resume")) == (
        "a fix of the load of the best at the end (workload=load_best) and workload=other; this run's is the resume "
        "after a restart (workload=resume)")
    assert not_applicable(cfg(["load_best"], "bogus")) == "needs bogus; transformers has none: transformers provides no bogus"
    assert not_applicable(cfg([], "resume")) == "a fix of no workload; this run's is the resume after a restart " \
                                                "(workload=resume)"


def test_n_a_reads_the_not_for_line_for_the_workload_and_fix_first_and_a_fix_that_needs_nothing_is_the_frameworks():
    """A scenario's not_for line for `<workload>/<fix>` is said before the rest; a run's workload that its
    framework does not lack yet has no words is named by its value; a fix with no `needs` asks the framework."""
    def cfg(workloads, workload, not_for=None):
        return {"fix": {"name": "fix", "workloads": workloads}, "framework": {"name": "transformers"},
                "workload": workload, "not_for": not_for or {}}

    assert not_applicable(cfg(["load_best"], "resume", {"resume/fix": "not for the resume"})) == "not for the resume"
    assert not_applicable(cfg(["resume"], "listing")) == ("a fix of the resume after a restart (workload=resume); "
                                                          "this run's is workload=listing")
    assert not_applicable(cfg(["resume"], "resume")) == "framework=transformers has no way to do fix=fix for " \
                                                        "workload=resume"


def test_a_list_with_choices_says_each_item_must_be_one_of_them():
    with pytest.raises(ConfigError) as e:
        make_plan(base_cfg(**{"fix.workloads": ["x"]}), LAPTOP)
    assert str(e.value) == "fix.workloads=['x']: must be a list, each one of load_best, resume"


@pytest.mark.cli  # the command line and make, as processes
def test_the_fix_axis_old_names_still_work(tmp_path):
    """`callback=` (the key), VARIANTS= and CALLBACK= (make's variables) were the fix axis' names before it was
    called fix everywhere: each still works, as the new name does."""
    from train.__main__ import with_keys_renamed

    assert with_keys_renamed(["callback=barrier", "callback._target_=a.B", "+callback.kwargs.x=1", "~callback",
                              "callbacks=x", "scenario=seed"]) == \
        ["fix=barrier", "fix._target_=a.B", "+fix.kwargs.x=1", "~fix", "callbacks=x", "scenario=seed"]
    proc, run_dir = cli(tmp_path, "callback=nope")  # through the real command line: refused as fix=nope is
    assert (proc.returncode, proc.stderr.strip()) == (2, "error: fix=nope: no such option; one of " + options("fix"))
    for target, old, new in (("sweep", "VARIANTS=a,b", "fix=a,b"), ("matrix", "VARIANTS=barrier", "fix=barrier"),
                             ("up-cpu", "CALLBACK=poll", "fix=poll")):
        dry = subprocess.run(["make", "-n", target, old], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0 and new in dry.stdout, dry.stdout + dry.stderr
