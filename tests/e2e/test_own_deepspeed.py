"""DeepSpeed's own save and resume (fix=own with framework=deepspeed): any class with Rank0LeadsCheckpoints'
interface (built with the folder and fix.kwargs; save(engine, epoch), resume(engine) returning the client state or
None), judged by what went through the engine's checkpoint engine and what its code did to the folder.

- A class that does not fit is refused before any rank starts, in one line, exit 2.
- docs/fixes/deepspeed.md's file, copied out of the repository and run as fix=own from there (no PYTHONPATH), gets
  fix=rank0_leads's verdict as measured (docs/measured/deepspeed-rank0_leads-r5.csv) on every scenario it holds
  (shard_lost, crash_mid_save, stale_tag); the faults sit in DeepSpeed's checkpoint engine, whoever calls
  save_checkpoint.
- examples/my_checkpoints/deepspeed_checkpoints.py's racing class (it resumes from the newest global_step folder it
  lists) is a race naming the file it failed on; its fixed counterpart (rank 0 picks the newest whole folder) holds.
  An independent script of DeepSpeed and torch alone, two gloo ranks resuming with each class from what a rank
  killed before its partition leaves, agrees."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import RACE_LAB, ROOT, side_by_side
from helpers.markdown import PYTHON_BLOCK
from train.report.measured import holds, read_measured

HELD = "shard_lost,crash_mid_save,stale_tag"  # fix=rank0_leads's rows (node_local_resume: docs/fixes/deepspeed.md)
CLASSES = "my_checkpoints.deepspeed_checkpoints"


def test_a_class_that_does_not_fit_deepspeeds_loop_is_refused_before_any_rank(tmp_path, monkeypatch):
    """The contract's declaration (framework.py's own_bases: the methods the loop calls and what it passes)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from train.config import ConfigError
    from train.launch.own_class import check_own_class

    (tmp_path / "unfit.py").write_text(textwrap.dedent("""
        class LoopShaped:  # the torch loop's interface, not DeepSpeed's
            def __init__(self, folder):
                pass

            def save(self, epoch, state, extra):
                pass

            def resume(self, engine):
                return None
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = OmegaConf.to_container(compose(config_name="train", overrides=[
            "fix=own", "fix._target_=unfit.LoopShaped", "framework=deepspeed", "scenario=shard_lost"]))
    with pytest.raises(ConfigError) as refused:
        check_own_class(cfg)
    assert str(refused.value) == ("fix._target_='unfit.LoopShaped': its save cannot be called as save(engine, epoch): "
                                  "missing a required argument: 'extra'")


def verdicts(launch) -> dict:
    assert launch.rc == 0, launch.out[-3000:]
    return {(s["config"]["fix"].get("_target_") or s["config"]["fix"]["name"]).rsplit(".", 1)[-1] + "/" +
            s["config"]["scenario"]: s for s, _ in launch.jobs()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The copy and the two example classes, side by side, from a folder outside the repo."""
    root = tmp_path_factory.mktemp("own_deepspeed")
    (root / "copied").mkdir()
    (root / "copied" / "__init__.py").write_text("")
    [code] = PYTHON_BLOCK.findall((ROOT / "docs" / "fixes" / "deepspeed.md").read_text())
    (root / "copied" / "rank0_leads.py").write_text(code)
    shutil.copytree(ROOT / "examples" / "my_checkpoints", root / "my_checkpoints")
    common = [RACE_LAB, "-m", "framework=deepspeed", "world_size=2"]
    groups = {
        "copy": ["fix=own", "fix._target_=copied.rank0_leads.Rank0LeadsCheckpoints", f"scenario={HELD}"],
        "classes": ["fix=own", f"fix._target_={CLASSES}.NewestFolderCheckpoints,{CLASSES}.WholeFolderCheckpoints",
                    "scenario=shard_lost,crash_mid_save"],
    }
    launches = side_by_side(root, {name: ([*common, *argv, f"hydra.sweep.dir={root / name}"], root / name)
                                   for name, argv in groups.items()}, deadline_s=900, cwd=root, env={"PYTHONPATH": ""})
    return {name: verdicts(launch) for name, launch in launches.items()}


@pytest.mark.slow
def test_the_deepspeed_helper_users_copy_gets_rank0_leads_verdicts(runs):
    copy = {key.split("/")[1]: s for key, s in runs["copy"].items()}
    measured = read_measured("deepspeed")  # fix=rank0_leads: 5 runs a row, the same class from train/
    assert all(holds(measured[scenario]["rank0_leads"]) for scenario in HELD.split(","))
    assert {k: s["verdict"] for k, s in copy.items()} == dict.fromkeys(HELD.split(","), "clean"), \
        {k: s["explanation"] for k, s in copy.items()}
    assert copy["shard_lost"]["resume"]["restarts"] == copy["crash_mid_save"]["resume"]["restarts"] == 1
    assert "every rank resumed from step 10, the newest complete checkpoint" in copy["shard_lost"]["explanation"]


@pytest.mark.slow
def test_a_racing_deepspeed_class_is_a_race_naming_the_file_and_its_fix_holds(runs):
    got = runs["classes"]
    for scenario in ("shard_lost", "crash_mid_save"):
        raced, held = got[f"NewestFolderCheckpoints/{scenario}"], got[f"WholeFolderCheckpoints/{scenario}"]
        assert raced["verdict"] == "race", raced["explanation"]
        assert held["verdict"] == "clean", held["explanation"]
    lost, torn = got["NewestFolderCheckpoints/shard_lost"], got["NewestFolderCheckpoints/crash_mid_save"]
    assert "rank 1 could not resume from it (missing: FileNotFoundError" in lost["explanation"]
    assert "rank 1 missing (resuming from " in lost["explanation"]
    assert "global_step20/zero_pp_rank_1_mp_rank_00_optim_states.pt: FileNotFoundError" in lost["explanation"]
    assert "corrupt (resuming from " in torn["explanation"]  # whichever rank read the torn file first
    assert "global_step20/mp_rank_00_model_states.pt: OSError" in torn["explanation"]


SCRIPT = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed, torch, torch.distributed as dist
    from my_checkpoints import deepspeed_checkpoints

    folder, name = Path(sys.argv[1]), sys.argv[2]
    deepspeed.init_distributed(dist_backend="gloo")
    me = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    engine = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), config={
        "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 1},
        "zero_allow_untested_optimizer": True, "steps_per_print": 10 ** 9})[0]
    checkpoints = getattr(deepspeed_checkpoints, name)(folder)
    for epoch in (0, 1):
        engine.backward(engine(torch.randn(4, 8)).pow(2).mean())
        engine.step()
        checkpoints.save(engine, epoch)
    if me == 1:  # what rank 1 killed before its partition of the second save leaves
        (folder / "global_step2" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    dist.barrier()
    try:
        seen = f"resumed epoch {checkpoints.resume(engine)['epoch']}"
    except Exception as e:
        seen = type(e).__name__
    Path(folder, f"seen{me}.txt").write_text(seen)  # a file a rank: two ranks' prints interleave on one pipe
    if seen.startswith("resumed"):
        dist.barrier()
    os._exit(0)  # a peer that failed leaves no group to destroy
""")


@pytest.mark.slow
def test_an_independent_deepspeed_script_resuming_after_a_lost_partition_agrees(tmp_path):
    shutil.copytree(ROOT / "examples" / "my_checkpoints", tmp_path / "my_checkpoints")
    (tmp_path / "script.py").write_text(SCRIPT)
    seen = {}
    for name in ("NewestFolderCheckpoints", "WholeFolderCheckpoints"):
        folder = tmp_path / name
        folder.mkdir()
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        "script.py", str(folder), name], cwd=tmp_path, capture_output=True, text=True, timeout=180,
                       env={**os.environ, "PYTHONPATH": str(tmp_path), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
        seen[name] = {r: (folder / f"seen{r}.txt").read_text() if (folder / f"seen{r}.txt").exists() else None
                      for r in (0, 1)}
    # race-lab: rank 1 missing (FileNotFoundError on global_step20's zero_pp_rank_1 partition); the fix: both step 10
    assert seen["NewestFolderCheckpoints"][1] == "FileNotFoundError", seen
    assert seen["WholeFolderCheckpoints"] == {0: "resumed epoch 0", 1: "resumed epoch 0"}, seen
