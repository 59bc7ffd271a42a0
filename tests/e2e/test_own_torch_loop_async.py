"""A torch loop's own async saves (fix=own where a scenario saves async): a class of yours that saves with
dcp.async_save and resumes with dcp.load, judged by what it did; the async faults placed at what its code does
through dcp (train/frameworks/torch_loop/own_async.py).

- docs/fixes/torch_loop-durable.md's file, copied out of the repository and checked as fix=own from there
  (race-lab check check.saves=async, no PYTHONPATH), gets fix=durable's measured verdict on every async scenario
  (docs/measured/torch_loop-async-durable-r5.csv): exit 0.
- examples/my_checkpoints/async_checkpoints.py's NaiveAsyncCheckpoints (named and cleaned at once, nothing waits at
  the end), checked beside it, races where the naive loop does: a crash with a save in flight leaves `latest`
  naming a folder never committed, the run ends with its last save never committed; the card sends the reader to
  the file to copy. An independent script of torch alone, two gloo ranks resuming with either class from what
  that crash leaves, agrees."""
import csv
import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import RACE_LAB, ROOT, side_by_side
from helpers.markdown import PYTHON_BLOCK

MEASURED = ROOT / "docs" / "measured" / "torch_loop-async-durable-r5.csv"
HELD = {"clean": "held"}  # a measured verdict -> the card's


@pytest.mark.slow
def test_the_durable_file_users_copy_holds_as_fix_durable_and_a_naive_class_races(tmp_path):
    (tmp_path / "copied").mkdir()
    (tmp_path / "copied" / "__init__.py").write_text("")
    [code] = PYTHON_BLOCK.findall((ROOT / "docs" / "fixes" / "torch_loop-durable.md").read_text())
    (tmp_path / "copied" / "durable.py").write_text(code)
    shutil.copytree(ROOT / "examples" / "my_checkpoints", tmp_path / "my_checkpoints")
    common = [RACE_LAB, "check", "framework=torch_loop", "check.saves=async", "check.repeats=1", "fix=own",
              "+fix.kwargs.keep_last=1"]
    launches = side_by_side(tmp_path, {
        name: ([*common, f"fix._target_={target}", f"hydra.sweep.dir={tmp_path / name}"], tmp_path / name)
        for name, target in (("copy", "copied.durable.DurableCheckpoints"),
                             ("naive", "my_checkpoints.async_checkpoints.NaiveAsyncCheckpoints"))
    }, deadline_s=900, cwd=tmp_path, env={"PYTHONPATH": ""})
    for launch in launches.values():
        launch.ended()
        assert "Traceback" not in launch.out, launch.out[-3000:]
    copy, naive = launches["copy"], launches["naive"]
    assert copy.rc == 0, copy.out[-3000:]
    checked = json.loads((copy.dir / "check.json").read_text())
    with MEASURED.open() as f:
        measured = {row["scenario"]: HELD.get(row["verdict"], "raced") for row in csv.DictReader(f)}
    assert {r["name"]: r["verdict"] for r in checked["scenarios"]} == measured, checked["scenarios"]

    assert naive.rc == 1, naive.out[-3000:]
    rows = {r["name"]: r for r in json.loads((naive.dir / "check.json").read_text())["scenarios"]}
    assert rows["async_in_flight"]["verdict"] == rows["async_exit_pending"]["verdict"] == "raced"
    in_flight, exit_pending = rows["async_in_flight"]["explanation"], rows["async_exit_pending"]["explanation"]
    assert "attempt 0 died on epoch1: rank 0 killed with SIGKILL in flight" in in_flight, in_flight
    assert "could not resume from it (missing: FileNotFoundError" in in_flight, in_flight
    assert "(epoch2) dispatched and never committed (no .metadata)" in exit_pending, exit_pending
    assert "the change that holds all 5: fix=durable (docs/fixes/torch_loop-durable.md)" in \
        " ".join(naive.out.split()), naive.out[-2000:]


SCRIPT = textwrap.dedent("""
    import shutil, sys
    from pathlib import Path
    import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp, torch.multiprocessing as mp

    def rank(r, folder, name, in_flight, latest, deleted):
        dist.init_process_group("gloo", init_method=f"file://{folder}/rdzv", rank=r, world_size=2)
        if name == "naive":
            from my_checkpoints.async_checkpoints import NaiveAsyncCheckpoints as Checkpoints
        else:
            from copied.durable import DurableCheckpoints as Checkpoints
        state = {"model": {"w": torch.full((4096,), float(r))}, "epoch": torch.tensor(0), "step": torch.tensor(10)}
        dcp.save(state, checkpoint_id=f"{folder}/epoch0")  # epoch 0, whole
        state["epoch"], state["step"] = torch.tensor(1), torch.tensor(20)
        dcp.save(state, checkpoint_id=f"{folder}/epoch1")  # epoch 1: every shard written, then as a crash leaves it
        dist.barrier()
        if r == 0:
            Path(folder, "epoch1", ".metadata").unlink()
            Path(folder, "epoch1").rename(Path(folder, in_flight))
            Path(folder, "latest").write_text(latest)
            if deleted != "-":
                shutil.rmtree(Path(folder, deleted))
        dist.barrier()
        try:
            seen = f"resumed epoch {Checkpoints(folder).resume()['epoch']}"
        except Exception as e:
            seen = type(e).__name__
        Path(folder, f"seen{r}.txt").write_text(seen)
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(rank, args=tuple(sys.argv[1:]), nprocs=2)
""")
# what rank 0 killed with epoch 1's save in flight leaves, before the restart's resume (folder, `latest`, deleted):
# its .metadata never written; the naive class had already named it in `latest` and deleted epoch 0, the durable one had it in
# its fresh folder, `latest` still naming epoch 0
LEFT = {"naive": ("epoch1", "epoch1", "epoch0"), "durable": (".epoch1.incoming", "epoch0", "-")}


@pytest.mark.slow
def test_an_independent_torch_script_resuming_after_a_save_in_flight_agrees(tmp_path):
    shutil.copytree(ROOT / "examples" / "my_checkpoints", tmp_path / "my_checkpoints")
    (tmp_path / "copied").mkdir()
    (tmp_path / "copied" / "__init__.py").write_text("")
    shutil.copy(ROOT / "train" / "frameworks" / "torch_loop" / "durable.py", tmp_path / "copied" / "durable.py")
    (tmp_path / "script.py").write_text(SCRIPT)
    seen = {}
    for name, left in LEFT.items():
        folder = tmp_path / name
        folder.mkdir()
        subprocess.run([sys.executable, "script.py", str(folder), name, *left], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, check=True)
        seen[name] = {f"rank {r}": (folder / f"seen{r}.txt").read_text() for r in (0, 1)}
    # race-lab: "rank 0 could not resume from it (missing: FileNotFoundError ..." after the in-flight kill
    assert seen["naive"] == {"rank 0": "FileNotFoundError", "rank 1": "FileNotFoundError"}
    assert seen["durable"] == {"rank 0": "resumed epoch 0", "rank 1": "resumed epoch 0"}
