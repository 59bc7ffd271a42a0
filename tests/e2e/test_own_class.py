"""fix=own: a checkpoint class of the user's, from outside train/ (examples/my_checkpoints, copied into a folder
of the user's), run with the race-lab command from that folder without PYTHONPATH, through the scenarios with real
ranks: for fastai (README's worked example, in the fast loop), Lightning (pytorch_lightning, and lightning.pytorch
with a constructor argument from fix.kwargs, on both workloads) and the Trainer (slow: each its own sweep, whose forkserver imports the
framework); a class that does not import, is of the wrong kind or cannot be built is refused in one line before any
rank starts (the check itself, then once through the command line)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import RACE_LAB, ROOT, side_by_side

EXAMPLE = "my_checkpoints.fastai_marker.MarkerSaveModelCallback"
USER_PATH = {"PYTHONPATH": str(ROOT / "examples")}  # the user's package, outside this repository's train/
LIGHTNING_PYTORCH = "my_checkpoints.lightning_pytorch_io.PatientCheckpointIO"  # written against lightning.pytorch
EXAMPLES = {  # name -> (framework, the class, the scenarios it runs through, more overrides)
    "fastai": ("fastai", EXAMPLE, "scenario=seed,torn,stale"),
    "lightning": ("lightning", "my_checkpoints.lightning_io.PatientCheckpointIO", "scenario=seed,stale,save_fails"),
    # its resume too, under the Lightning it is written against, fit(ckpt_path="last") as shipped
    "lightning_pytorch": ("lightning", LIGHTNING_PYTORCH, "scenario=seed,stale,save_fails,crash_mid_save,resume_disagree",
                          "+fix.kwargs.wait_s=5"),
    "transformers": ("transformers", "my_checkpoints.trainer_callback.SayBest",
                     "scenario=seed,stale,save_fails,crash_mid_save,cleanup"),  # the resume too, the callback on it
}


def run_examples(root, names) -> dict:
    """name -> scenario -> (summary.json, job dir): these examples' sweeps, side by side, each run as a user runs
    it: `race-lab -m ...` from their own folder, which holds their package (a copy of examples/my_checkpoints), with
    no PYTHONPATH."""
    shutil.copytree(ROOT / "examples" / "my_checkpoints", root / "my_checkpoints")
    launches = side_by_side(root, {
        name: ([RACE_LAB, "-m", f"framework={framework}", scenarios, "fix=own", f"fix._target_={target}",
                "world_size=2", *more, f"hydra.sweep.dir={root / name}"], root / name)
        for name, (framework, target, scenarios, *more) in EXAMPLES.items() if name in names},
        deadline_s=900, cwd=root, env={"PYTHONPATH": ""})
    out = {}
    for name, launch in launches.items():
        assert launch.rc == 0, launch.out[-3000:]
        out[name] = {s["config"]["scenario"]: (s, job) for s, job in launch.jobs()}
    return out


@pytest.fixture(scope="module")
def examples(tmp_path_factory) -> dict:
    """fastai's example (README's)."""
    return run_examples(tmp_path_factory.mktemp("own"), ["fastai"])


@pytest.fixture(scope="module")
def other_examples(tmp_path_factory) -> dict:
    """Lightning's (pytorch_lightning's and lightning.pytorch's) and the Trainer's, side by side."""
    return run_examples(tmp_path_factory.mktemp("own_others"), ["lightning", "lightning_pytorch", "transformers"])


def verdicts(jobs) -> dict:
    return {scenario: s["verdict"] for scenario, (s, _) in jobs.items()}


def rank_logs(job, rank) -> str:
    return "".join(p.read_text() for p in job.glob(f"logs/*/attempt_0/{rank}/stdout.log"))


@pytest.mark.slow  # real ranks, three scenarios
def test_a_fastai_callback_of_your_own_runs_through_three_scenarios(examples):
    """The marker holds for a late writer (seed) and a slow one (torn); an older checkpoint's marker lets
    readers load the older weights (stale): what README's worked example says."""
    jobs = examples["fastai"]
    assert verdicts(jobs) == {"seed": "clean", "torn": "clean", "stale": "race"}
    stale, _ = jobs["stale"]
    assert [r["outcome"] for r in stale["ranks"]] == ["loaded", "stale"]
    assert "rank 1 loaded an older checkpoint" in stale["explanation"]
    events = [json.loads(line) for line in (jobs["torn"][1] / "events/rank1.jsonl").open()]
    assert [e["how"] for e in events if e["event"] == "sync_exit"] == ["marker"]  # its own sync ran


@pytest.mark.slow
def test_a_lightning_checkpoint_io_of_your_own_runs_through_three_scenarios(other_examples):
    """Lightning's plugin is the user's class under race-lab's observation: its own load ran on every rank."""
    jobs = other_examples["lightning"]
    assert verdicts(jobs) == {"seed": "clean", "stale": "clean", "save_fails": "race"}
    for rank in (0, 1):
        assert "PatientCheckpointIO: loading best.ckpt" in rank_logs(jobs["seed"][1], rank)


@pytest.mark.slow
def test_a_lightning_pytorch_checkpoint_io_of_your_own_runs_under_its_trainer_with_its_kwargs(other_examples):
    """A TorchCheckpointIO written against the lightning package (lightning.pytorch), whose constructor needs
    wait_s (+fix.kwargs.wait_s=5): lightning.pytorch's Trainer runs it (pytorch_lightning's refuses a plugin of the
    other copy), built with wait_s on every rank; the console and the report name the class."""
    jobs = other_examples["lightning_pytorch"]
    # the resume as shipped: crash_mid_save clean (Lightning writes whole), resume_disagree a race (rank 1's stale
    # listing finds no last.ckpt and starts afresh while rank 0 resumes: its collective waits, out of restarts)
    assert verdicts(jobs) == {"seed": "clean", "stale": "clean", "save_fails": "race", "crash_mid_save": "clean",
                              "resume_disagree": "race"}
    for rank in (0, 1):  # the restart's resume read through the class, under lightning.pytorch's Trainer
        restarted = "".join(p.read_text() for p in jobs["crash_mid_save"][1].glob(f"logs/*/attempt_1/{rank}/stdout.log"))
        assert "PatientCheckpointIO (lightning.pytorch, wait_s=5): loading last.ckpt" in restarted
    for rank in (0, 1):
        assert "PatientCheckpointIO (lightning.pytorch, wait_s=5): loading best.ckpt" in \
               rank_logs(jobs["seed"][1], rank)
    seed = jobs["seed"][1]
    assert "fix=own (PatientCheckpointIO) framework=lightning" in (seed / "console.log").read_text()
    assert "| seed | lightning:own (PatientCheckpointIO) |" in (seed.parent / "report.md").read_text()


@pytest.mark.slow
def test_a_trainer_callback_of_your_own_runs_through_both_workloads(other_examples):
    """The load of the best and the Trainer's own resume, the callback attached to both: on the resume it gets the
    Trainer's verdicts as shipped (a torn newest checkpoint-<step> is resumed from; the rotation holds)."""
    jobs = other_examples["transformers"]
    assert verdicts(jobs) == {"seed": "clean", "stale": "clean", "save_fails": "race", "crash_mid_save": "race",
                              "cleanup": "clean"}
    assert "could not resume from it (corrupt" in jobs["crash_mid_save"][0]["explanation"]
    for rank in (0, 1):
        assert f"SayBest: process {rank}: best checkpoint-" in rank_logs(jobs["seed"][1], rank)
        assert f"SayBest: process {rank}: best -" in rank_logs(jobs["cleanup"][1], rank)  # it ran on the resume


def race_lab(cwd, *args, timeout=300):
    """python -m train as a user runs it from their own folder, with their package on PYTHONPATH."""
    return subprocess.run([sys.executable, "-m", "train", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **USER_PATH})


REFUSED = [
    ("fastai", "nope.Missing", "does not import (ModuleNotFoundError: No module named 'nope')"),
    ("fastai", "collections.OrderedDict", "is a class of another kind, not a subclass of "
                                          "train.frameworks.fastai.callbacks.RaceSaveModelCallback or a class with "
                                          "Rank0LeadsSaveModelCallback's methods path_of(name), "
                                          "write_checkpoint(path, data), write_bytes(f, data), read_checkpoint(path), "
                                          "broadcast(obj), loaded(path), not_loaded(why)"),
    ("fastai", "my_checkpoints.fastai_marker", "is a module, not a class"),
    ("lightning", EXAMPLE, "is a class of another kind, not a subclass of pytorch_lightning.plugins.TorchCheckpointIO "
                           "or pytorch_lightning.callbacks.ModelCheckpoint or lightning.pytorch.plugins.TorchCheckpointIO "
                           "or lightning.pytorch.callbacks.ModelCheckpoint"),  # fastai's, where Lightning runs
    ("lightning", LIGHTNING_PYTORCH, "cannot be built: missing a required argument: 'wait_s' "
                                     "(give it with +fix.kwargs.wait_s=VALUE)"),  # no fix.kwargs
    ("lightning", f"{LIGHTNING_PYTORCH} +fix.kwargs.wait_s=-1",
     "cannot be built (ValueError: wait_s must be >= 0, not -1)"),  # its constructor raises
]


@pytest.mark.parametrize("framework, target, says", REFUSED)
def test_a_class_that_does_not_import_or_is_of_the_wrong_kind_is_refused(monkeypatch, framework, target, says):
    """The launcher's check (train/launch/own_class.py, which preflight calls for fix=own), in this process:
    it imports the class in a child process, which finds the user's package on PYTHONPATH, and builds it with
    fix.kwargs (a class built from them alone) or binds them to its constructor (one built from race-lab's
    objects too)."""
    target, *more = target.split()
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from train.config import ConfigError
    from train.launch.own_class import check_own_class

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = OmegaConf.to_container(compose(config_name="train", overrides=[
            "fix=own", f"fix._target_={target}", f"framework={framework}", *more]))
    monkeypatch.setenv("PYTHONPATH", USER_PATH["PYTHONPATH"])
    with pytest.raises(ConfigError) as refused:
        check_own_class(cfg)
    assert str(refused.value) == f"fix._target_={target!r}: {says}"


@pytest.mark.slow  # the probe imports Lightning: about 15 s on 2 busy cores
@pytest.mark.parametrize("function, says", [
    ("my_checkpoints.lightning_io.nowhere", "does not import (AttributeError: module 'my_checkpoints.lightning_io' "
                                            "has no attribute 'nowhere')"),
    ("os.getcwd", "cannot be called as getcwd(folder): too many positional arguments"),  # it takes none
])
def test_a_ckpt_path_function_that_does_not_import_or_take_the_folder_is_refused(monkeypatch, function, says):
    """fix.ckpt_path (Lightning's resume: what fit(ckpt_path=...) gets) names a function of yours called with the
    checkpoint folder; the launcher's check imports it beside the class and binds the folder to it."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from train.config import ConfigError
    from train.launch.own_class import check_own_class

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = OmegaConf.to_container(compose(config_name="train", overrides=[
            "fix=own", "fix._target_=my_checkpoints.lightning_io.PatientCheckpointIO", "framework=lightning",
            f"fix.ckpt_path={function}"]))
    monkeypatch.setenv("PYTHONPATH", USER_PATH["PYTHONPATH"])
    with pytest.raises(ConfigError) as refused:
        check_own_class(cfg)
    assert str(refused.value) == f"fix.ckpt_path={function!r}: {says}"


@pytest.mark.cli
def test_a_class_that_does_not_import_is_refused_by_the_command_line_before_any_rank(tmp_path):
    """One refusal through python -m train (the others take the same path): one line, exit 2, no run dir."""
    framework, target, says = REFUSED[0]
    run_dir = tmp_path / "run"
    done = race_lab(tmp_path, f"hydra.run.dir={run_dir}", "fix=own", f"fix._target_={target}",
                    "world_size=2", f"framework={framework}")
    assert (done.returncode, done.stderr) == (2, f"error: fix._target_={target!r}: {says}\n")
    assert not run_dir.exists()


RAISING = '''
from pytorch_lightning.callbacks import ModelCheckpoint

from train.callbacks import RaceSaveModelCallback


class RaisingSaveModelCallback(RaceSaveModelCallback):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        raise RuntimeError(f"no quota for {self.fname}.pth")


class RaisingCheckpoint(ModelCheckpoint):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        raise RuntimeError(f"{self.monitor} is not logged by our module")


class BestOnlyCheckpoint(ModelCheckpoint):
    """Written for the load of the best: it takes the arguments that load gives it, and no others."""

    def __init__(self, dirpath, filename, monitor, mode, save_top_k):
        super().__init__(dirpath=dirpath, filename=filename, monitor=monitor, mode=mode, save_top_k=save_top_k)
'''


@pytest.mark.slow  # a process that imports fastai or Lightning each: about 15 s apiece on 2 busy cores
@pytest.mark.parametrize("framework, target, says", [
    ("fastai", "raising.RaisingSaveModelCallback", "cannot be built (RuntimeError: no quota for best.pth)"),
    ("lightning", "raising.RaisingCheckpoint", "cannot be built (RuntimeError: val_acc is not logged by our module)"),
])
def test_a_class_whose_constructor_raises_with_what_the_adapter_gives_is_refused(tmp_path, monkeypatch, framework,
                                                                                 target, says):
    """issue 44: a fastai callback or a ModelCheckpoint of yours is built before any rank starts with what its
    adapter gives it (stand-ins for the rank's event log and faults, the run's config values, a fresh folder). That
    a class that builds passes, stand-ins and all: the examples' runs above (MarkerSaveModelCallback)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from train.config import ConfigError
    from train.launch.own_class import check_own_class

    (tmp_path / "raising.py").write_text(RAISING)
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = OmegaConf.to_container(compose(config_name="train", overrides=[
            "fix=own", f"fix._target_={target}", f"framework={framework}"]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), USER_PATH["PYTHONPATH"]]))
    with pytest.raises(ConfigError) as refused:
        check_own_class(cfg)
    assert str(refused.value) == f"fix._target_={target!r}: {says}"


@pytest.mark.slow  # three processes that import Lightning: about 15 s apiece on 2 busy cores
def test_a_class_the_resume_cannot_build_is_refused_for_the_resume_and_its_rows_not_checked(tmp_path, monkeypatch):
    """A ModelCheckpoint of yours is built as each workload builds it (the resume gives every_n_epochs, save_last,
    ...): one run of the resume is refused before any rank; a check runs the load's rows and says the resume's are
    not checked, and why."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from train.config import ConfigError
    from train.launch.check import plan_check
    from train.launch.own_class import check_own_class

    (tmp_path / "raising.py").write_text(RAISING)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), USER_PATH["PYTHONPATH"]]))
    target = "raising.BestOnlyCheckpoint"
    says = (f"fix._target_={target!r}: cannot be built as workload=resume builds it: missing a required argument: "
            "'filename' (give it with +fix.kwargs.filename=VALUE)")
    plan = plan_check(["framework=lightning", "fix=own", f"fix._target_={target}"])
    rows = {s["workload"]: set() for s in plan["scenarios"]}
    for s in plan["scenarios"]:
        rows[s["workload"]].add(s["cannot"])  # None: it runs; else why it is not checked
    assert None in rows["load_best"] and says not in rows["load_best"]
    assert None not in rows["resume"] and says in rows["resume"]  # the line a single run is refused with
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = OmegaConf.to_container(compose(config_name="train", overrides=[
            "fix=own", f"fix._target_={target}", "framework=lightning", "scenario=crash_mid_save"]))
    assert cfg["workload"] == "resume"
    with pytest.raises(ConfigError) as refused:
        check_own_class(cfg)
    assert str(refused.value) == says
