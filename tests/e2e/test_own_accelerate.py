"""A checkpoint helper of yours in Accelerate (fix=own): a class with Rank0Leads's methods (save, load_best, resume),
which the loop calls where it calls race-lab's Rank0Leads for fix=rank0_leads, and judged by what it did.

- docs/fixes/accelerate.md's file, copied byte for byte into a folder outside the repository and run from there as
  fix=own with no PYTHONPATH, gets fix=rank0_leads's verdict on each scenario, of both workloads.
- A helper written as Accelerate's docs show (examples/my_checkpoints/own_state_accelerate.py: save_state on every
  process, load_state of the best at the end, nothing between) is a race naming model.safetensors on the seed
  scenario; the same with accelerator.wait_for_everyone() after the save is clean.
- A class without those methods, or whose constructor raises, is refused in one line before any rank starts.
- An independent script of Accelerate and torch alone (two gloo ranks under torchrun, the main process late at its
  last save) runs the same helper and agrees: process 1 loads the previous save's weights; with the wait, the last.
"""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import OWN_CLASSES, RACE_LAB, ROOT, side_by_side
from helpers.markdown import PYTHON_BLOCK

SCENARIOS = "seed,save_fails,no_shared_fs,crash_mid_save"  # load_best's hardest and resume's (one sweep, both)
COMMON = ["-m", "framework=accelerate", "world_size=2", "skew.end_when_settled=true"]


@pytest.mark.slow
def test_the_fix_users_copy_gets_the_built_in_fix_verdicts(tmp_path):
    (tmp_path / "copied").mkdir()
    (tmp_path / "copied" / "__init__.py").write_text("")
    [code] = PYTHON_BLOCK.findall((ROOT / "docs" / "fixes" / "accelerate.md").read_text())
    (tmp_path / "copied" / "rank0_leads.py").write_text(code)
    common = [RACE_LAB, *COMMON, f"scenario={SCENARIOS}"]
    [launch] = side_by_side(tmp_path, {
        "copy": ([*common, "fix=own", "fix._target_=copied.rank0_leads.Rank0Leads", f"hydra.sweep.dir={tmp_path / 'copy'}"],
                 tmp_path / "copy"),
    }, deadline_s=900, cwd=tmp_path, env={"PYTHONPATH": ""}).values()
    assert launch.rc == 0, launch.out[-3000:]
    # fix=rank0_leads's verdicts on these scenarios, which tests/e2e/frameworks/test_accelerate_rank0_leads.py holds
    assert {s["config"]["scenario"]: s["verdict"] for s, _ in launch.jobs()} == {
        "seed": "clean", "save_fails": "save_failed", "no_shared_fs": "clean", "crash_mid_save": "clean"}


@pytest.mark.slow
def test_your_helper_racing_is_a_race_naming_the_file_and_a_wait_after_the_save_holds(tmp_path):
    shutil.copytree(ROOT / "examples" / "my_checkpoints", tmp_path / "my_checkpoints")
    classes = ",".join(f"my_checkpoints.own_state_accelerate.{c}" for c in ("StateSaver", "SyncedStateSaver"))
    [launch] = side_by_side(tmp_path, {"own": ([RACE_LAB, *COMMON, "scenario=seed", "fix=own",
                                                f"fix._target_={classes}", f"hydra.sweep.dir={tmp_path / 'own'}"],
                                               tmp_path / "own")},
                            deadline_s=600, cwd=tmp_path, env={"PYTHONPATH": ""}).values()
    assert launch.rc == 0, launch.out[-3000:]
    jobs = {s["config"]["fix"]["_target_"].rsplit(".", 1)[1]: s for s, _ in launch.jobs()}
    raced, held = jobs["StateSaver"], jobs["SyncedStateSaver"]
    assert raced["verdict"] == "race", raced["explanation"]
    assert {r["rank"]: r["outcome"] for r in raced["ranks"]}[1] == "stale", raced["ranks"]
    assert "rank 1 loaded an older checkpoint (the epoch-1 save) from best/model.safetensors" in raced["explanation"], \
        raced["explanation"]
    assert held["verdict"] == "clean", held["explanation"]


SCRIPT = textwrap.dedent("""
    import os, sys, time
    import torch
    from accelerate import Accelerator
    from my_checkpoints.own_state_accelerate import StateSaver, SyncedStateSaver

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(4, 2))
    net = accelerator.unwrap_model(model)
    helper = (SyncedStateSaver if sys.argv[1] == "synced" else StateSaver)(accelerator, model)
    for epoch in range(2):  # each epoch a new best, saved by the helper on every process
        with torch.no_grad():
            net.weight.fill_(epoch)
        accelerator.gather(torch.tensor([epoch]))  # the epoch's metric, gathered (a collective)
        if epoch == 1 and accelerator.is_main_process:
            time.sleep(5)  # the main process is late at its last save
        helper.save("best")
    helper.load_best("best")
    with open(f"rank{accelerator.process_index}.loaded", "w") as f:  # one file a process: no lines interleaved
        f.write(f"epoch {net.weight[0, 0].item():.0f}")
    accelerator.wait_for_everyone()
    accelerator.end_training()
""")


@pytest.mark.slow
def test_an_independent_accelerate_script_of_the_same_helper_agrees(tmp_path):
    shutil.copytree(ROOT / "examples" / "my_checkpoints", tmp_path / "my_checkpoints")
    (tmp_path / "script.py").write_text(SCRIPT)
    seen = {}
    for how in ("racing", "synced"):
        (tmp_path / how).mkdir()
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        str(tmp_path / "script.py"), how], cwd=tmp_path / how, capture_output=True, timeout=300,
                       check=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
        seen[how] = [(tmp_path / how / f"rank{r}.loaded").read_text() for r in (0, 1)]
    assert seen["racing"] == ["epoch 1", "epoch 0"]  # race-lab: rank 1 stale
    assert seen["synced"] == ["epoch 1", "epoch 1"]


REFUSED = [
    ("accelerate_helpers.NoResume", "has no method resume(), which race-lab calls"),
    ("accelerate_helpers.RaisingHelper", "cannot be built (RuntimeError: no quota for the checkpoints folder)"),
]


@pytest.mark.parametrize("target, says", REFUSED)
def test_a_helper_without_the_methods_or_whose_constructor_raises_is_refused(monkeypatch, target, says):
    """The launcher's check (train/launch/own_class.py), which builds the class with stand-ins for the Accelerator
    and the model in a child process that finds it on PYTHONPATH."""
    from train.config import ConfigError
    from train.launch.own_class import check_own_class
    from helpers.compose import composed

    monkeypatch.setenv("PYTHONPATH", str(OWN_CLASSES))
    with pytest.raises(ConfigError) as refused:
        check_own_class(composed("framework=accelerate", "fix=own", f"fix._target_={target}"))
    assert str(refused.value) == f"fix._target_={target!r}: {says}"
