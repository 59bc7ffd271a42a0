"""A class of yours judged by what its own code did to checkpoint files (train/rank/observe.py, then
train/judge/own_reads.py), in fastai, Lightning and the Trainer: each class exports its own weights.pt on rank 0 when
training ends and loads it on every rank (examples/my_checkpoints/weights_file.py, rank 0 slower by EXPORT_S).
With nothing between the write and the reads it is a race naming that file and the line of yours that read it;
with a barrier after the write it is clean. An independent script of torch alone, running the same function on two
gloo ranks, agrees: rank 1 finds no file, and with the barrier every rank loads rank 0's weights."""
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import RACE_LAB, ROOT, side_by_side
from train.events import read_events

CLASSES = {  # framework -> (the module of yours, the racing class, the same with a barrier after the write)
    "fastai": ("own_file_fastai", "ExportingSaveModelCallback", "SyncedExportingSaveModelCallback"),
    "lightning": ("own_file_lightning", "ExportingCheckpoint", "SyncedExportingCheckpoint"),
    "transformers": ("own_file_trainer", "ExportingCallback", "SyncedExportingCallback"),
}
# the racing Lightning class leaves rank 0 in validate's collective, whose peer is gone: it ends at this timeout
COLLECTIVE_S = "timeout.collective_s=30"


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory) -> dict:
    """framework -> the class's name -> its summary: each framework's two classes as one sweep, the three side by
    side, run with race-lab from a folder of the user's that holds their package."""
    root = tmp_path_factory.mktemp("own_files")
    shutil.copytree(ROOT / "examples" / "my_checkpoints", root / "my_checkpoints")
    launches = side_by_side(root, {
        name: ([RACE_LAB, "-m", f"framework={name}", "world_size=2", "fix=own", COLLECTIVE_S,
                f"fix._target_={','.join(f'my_checkpoints.{module}.{c}' for c in classes)}",
                f"hydra.sweep.dir={root / name}"], root / name)
        for name, (module, *classes) in CLASSES.items()}, deadline_s=900, cwd=root, env={"PYTHONPATH": ""})
    out = {}
    for name, launch in launches.items():
        assert launch.rc == 0, launch.out[-3000:]
        out[name] = {s["config"]["fix"]["_target_"].rsplit(".", 1)[1]: {**s, "dir": d} for s, d in launch.jobs()}
    return out


@pytest.mark.slow
@pytest.mark.parametrize("framework", list(CLASSES))
def test_your_own_file_read_before_it_is_written_is_a_race_naming_it_and_a_barrier_holds(sweeps, framework):
    _, racing, synced = CLASSES[framework]
    raced, held = sweeps[framework][racing], sweeps[framework][synced]
    assert raced["verdict"] == "race", raced["explanation"]
    assert {r["rank"]: r["outcome"] for r in raced["ranks"]}[1] == "missing"
    assert ("rank 1 tried to load (your code's read of models/weights.pt, read in my_checkpoints/weights_file.py:"
            in raced["explanation"]) and "found no file)" in raced["explanation"]
    assert held["verdict"] == "clean", held["explanation"]
    if framework == "fastai":  # the exception left fastai's fit (the others' adapters record it on the way)
        [raised] = [e for e in read_events(raced["dir"]) if e["event"] == "rank_error"]
        assert (raised["rank"], raised["error_type"]) == (1, "FileNotFoundError")
        assert raised["by"].endswith("my_checkpoints/weights_file.py:24")  # your line, though torch.load raised it
        assert "torch/serialization.py:" in raised["at"]


SCRIPT = textwrap.dedent("""
    import os, sys
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    from my_checkpoints.weights_file import export_then_load

    def rank(r, folder, synced):
        dist.init_process_group("gloo", init_method=f"file://{folder}/rdzv", rank=r, world_size=2)
        torch.manual_seed(r)  # each rank's weights its own until it loads rank 0's
        model = torch.nn.Linear(4, 2)
        try:
            export_then_load(model, folder, synced)
            seen = f"loaded {float(model.weight.sum()):.6f}"
        except Exception as e:
            seen = type(e).__name__
        with open(os.path.join(folder, f"seen{r}.txt"), "w") as f:  # a file a rank: prints interleave on one pipe
            f.write(seen)
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(rank, args=(sys.argv[1], sys.argv[2] == "synced"), nprocs=2)
""")


@pytest.mark.slow
def test_an_independent_torch_script_of_the_same_pattern_agrees(tmp_path):
    shutil.copytree(ROOT / "examples" / "my_checkpoints", tmp_path / "my_checkpoints")
    (tmp_path / "script.py").write_text(SCRIPT)
    seen = {}
    for how in ("racing", "synced"):
        folder = tmp_path / how
        folder.mkdir()
        subprocess.run([sys.executable, "script.py", str(folder), how], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, check=True)
        seen[how] = {f"rank {r}": (folder / f"seen{r}.txt").read_text() for r in (0, 1)}
    assert seen["racing"]["rank 1"] == "FileNotFoundError"  # race-lab: rank 1 missing, no file
    assert seen["synced"]["rank 0"].startswith("loaded") and seen["synced"]["rank 0"] == seen["synced"]["rank 1"]
