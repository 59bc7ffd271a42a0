"""A torch loop's own save and resume (fix=own with framework=torch_loop): any class with Rank0Checkpoints'
interface (built with the folder and fix.kwargs; save(epoch, state), resume()), judged by what it did.

- A class that does not fit is refused before any rank starts, in one line, exit 2: no such method, a method that
  cannot take what the loop passes, a constructor that raises.
- docs/fixes/torch_loop.md's file, copied out of the repository and run as fix=own from there (no PYTHONPATH), gets
  fix=rank0_leads's verdict on every resume scenario; the faults are placed at what its code does (own.py).
- examples/my_checkpoints/loop_checkpoints.py's racing class (rank 0 torch.saves in place, every rank lists and
  loads the newest, every rank deletes) is a race naming the file; its fixed counterpart holds. An independent
  script of torch alone, two gloo ranks resuming with the racing class from what a crash halfway leaves, agrees."""
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import RACE_LAB, ROOT, side_by_side
from helpers.markdown import PYTHON_BLOCK

SCENARIOS = "crash_mid_save,pointer_first,cleanup,resume_disagree"
UNFIT = textwrap.dedent("""
    class NoResume:
        def __init__(self, folder):
            pass

        def save(self, epoch, state):
            pass

    class SaveTakesOne(NoResume):
        def save(self, state):
            pass

        def resume(self):
            return None

    class Raises(SaveTakesOne):
        def __init__(self, folder):
            raise RuntimeError("no disk here")

        def save(self, epoch, state):
            pass
""")


@pytest.mark.parametrize("name, why", [
    ("NoResume", "has no method resume(), which race-lab calls"),
    ("SaveTakesOne", "its save cannot be called as save(epoch, state): too many positional arguments"),
    ("Raises", "cannot be built (RuntimeError: no disk here)"),
])
def test_a_class_that_does_not_fit_the_loop_is_refused_before_any_rank(tmp_path, monkeypatch, name, why):
    """The contract's declaration (framework.py's own_bases: no base, the methods the loop calls and what it passes)
    checked in the probe's process, as the command line checks it (test_own_class.py runs that path)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from train.config import ConfigError
    from train.launch.own_class import check_own_class

    (tmp_path / "unfit.py").write_text(UNFIT)
    monkeypatch.chdir(tmp_path)  # the probe finds a class of yours in the folder run from, as the ranks do
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = OmegaConf.to_container(compose(config_name="train", overrides=[
            "fix=own", f"fix._target_=unfit.{name}", "framework=torch_loop", "scenario=crash_mid_save"]))
    with pytest.raises(ConfigError) as refused:
        check_own_class(cfg)
    assert str(refused.value) == f"fix._target_='unfit.{name}': {why}"


def verdicts(launch) -> dict:
    assert launch.rc == 0, launch.out[-3000:]
    return {(s["config"]["fix"].get("_target_") or "").rsplit(".", 1)[-1] + "/" + s["config"]["scenario"]:
            s for s, _ in launch.jobs()}


@pytest.mark.slow
def test_the_loop_helper_users_copy_gets_rank0_leads_verdicts(tmp_path):
    (tmp_path / "copied").mkdir()
    (tmp_path / "copied" / "__init__.py").write_text("")
    [code] = PYTHON_BLOCK.findall((ROOT / "docs" / "fixes" / "torch_loop.md").read_text())
    (tmp_path / "copied" / "rank0_leads.py").write_text(code)
    common = [RACE_LAB, "-m", "framework=torch_loop", "world_size=2", f"scenario={SCENARIOS}"]
    launches = side_by_side(tmp_path, {
        "copy": ([*common, "fix=own", "fix._target_=copied.rank0_leads.Rank0Checkpoints", "+fix.kwargs.keep_last=1",
                  "+fix.kwargs.pointer=true", f"hydra.sweep.dir={tmp_path / 'copy'}"], tmp_path / "copy"),
    }, deadline_s=900, cwd=tmp_path, env={"PYTHONPATH": ""})
    copy = verdicts(launches["copy"])
    got = {key.split("/")[1]: s["verdict"] for key, s in copy.items()}
    # fix=rank0_leads is clean on every one (docs/fixes/torch_loop.md; test_rank0_leads_fastai_and_loop.py holds it)
    assert got == dict.fromkeys(SCENARIOS.split(","), "clean"), {k: s["explanation"] for k, s in copy.items()}
    restarted = {key.split("/")[1]: s["resume"]["restarts"] for key, s in copy.items()}
    assert restarted["crash_mid_save"] == restarted["pointer_first"] == restarted["resume_disagree"] == 1  # killed


@pytest.mark.slow
def test_a_racing_loop_class_is_a_race_naming_the_file_and_its_fix_holds(tmp_path):
    shutil.copytree(ROOT / "examples" / "my_checkpoints", tmp_path / "my_checkpoints")
    classes = ",".join(f"my_checkpoints.loop_checkpoints.{c}" for c in ("EveryRankCheckpoints", "LeadingCheckpoints"))
    common = [RACE_LAB, "-m", "framework=torch_loop", "world_size=2", "fix=own", f"fix._target_={classes}"]
    launches = side_by_side(tmp_path, {  # the classes keep every checkpoint unless told (keep_last)
        "resumes": ([*common, "scenario=crash_mid_save,resume_disagree", f"hydra.sweep.dir={tmp_path / 'resumes'}"],
                    tmp_path / "resumes"),
        "cleanup": ([*common, "scenario=cleanup", "+fix.kwargs.keep_last=1", f"hydra.sweep.dir={tmp_path / 'cleanup'}"],
                    tmp_path / "cleanup"),
    }, deadline_s=900, cwd=tmp_path, env={"PYTHONPATH": ""})
    got = {**verdicts(launches["resumes"]), **verdicts(launches["cleanup"])}
    for scenario in ("crash_mid_save", "cleanup", "resume_disagree"):
        raced, held = got[f"EveryRankCheckpoints/{scenario}"], got[f"LeadingCheckpoints/{scenario}"]
        assert raced["verdict"] == "race", raced["explanation"]
        assert held["verdict"] == "clean", held["explanation"]
    torn, deleted, split = (got[f"EveryRankCheckpoints/{s}"] for s in ("crash_mid_save", "cleanup", "resume_disagree"))
    assert "could not resume from it (corrupt" in torn["explanation"] and "epoch1.pt" in torn["explanation"]
    assert "rank 1 missing (deleting " in deleted["explanation"] and "FileNotFoundError" in deleted["explanation"]
    assert "the ranks resumed from different checkpoints (rank 0 from step 20, rank 1 from step 10)" \
        in split["explanation"]


SCRIPT = textwrap.dedent("""
    import io, sys
    from pathlib import Path
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    from my_checkpoints import loop_checkpoints

    def rank(r, folder, name):
        dist.init_process_group("gloo", init_method=f"file://{folder}/rdzv", rank=r, world_size=2)
        try:
            state = getattr(loop_checkpoints, name)(folder).resume()
            seen = f"resumed epoch {state['epoch']}"
        except Exception as e:
            seen = type(e).__name__
        Path(folder, f"seen{r}.txt").write_text(seen)  # a file a rank: two ranks' prints interleave on one pipe
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        folder, name = Path(sys.argv[1]), sys.argv[2]
        torch.save({"model": {}, "epoch": 0, "step": 1}, folder / "epoch0.pt")
        buffer = io.BytesIO()
        torch.save({"model": {"w": torch.zeros(4096)}, "epoch": 1, "step": 2}, buffer)
        torn = folder / ("epoch1.pt" if name == "EveryRankCheckpoints" else ".epoch1.pt.tmp")
        torn.write_bytes(buffer.getvalue()[:len(buffer.getvalue()) // 2])  # what a crash halfway through leaves
        mp.spawn(rank, args=(str(folder), name), nprocs=2)
""")


@pytest.mark.slow
def test_an_independent_torch_script_resuming_after_a_torn_save_agrees(tmp_path):
    shutil.copytree(ROOT / "examples" / "my_checkpoints", tmp_path / "my_checkpoints")
    (tmp_path / "script.py").write_text(SCRIPT)
    seen = {}
    for name in ("EveryRankCheckpoints", "LeadingCheckpoints"):
        folder = tmp_path / name
        folder.mkdir()
        subprocess.run([sys.executable, "script.py", str(folder), name], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, check=True)
        seen[name] = {f"rank {r}": (folder / f"seen{r}.txt").read_text() for r in (0, 1)}
    # race-lab: every rank corrupt, "could not resume from it (corrupt: OSError: [Errno 22] Invalid argument)"
    assert seen["EveryRankCheckpoints"] == {"rank 0": "OSError", "rank 1": "OSError"}
    assert seen["LeadingCheckpoints"] == {"rank 0": "resumed epoch 0", "rank 1": "resumed epoch 0"}
