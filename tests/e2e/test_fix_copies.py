"""A shipped fix, copied as a user copies it, is judged as the fix is: docs/fixes/<framework>.md's file, taken from
the page's code block into a folder outside the repository and run from there as `fix=own`, gets the built-in
fix's verdict on each scenario. The adapter judges both by what the ranks did (the weights each ends with, what its
code warned, where its class raised), never by the fix's name. Before, the Trainer's copy was unsafe on save_fails
("rank 1 never said the save failed") and no_shared_fs (rank 1 FileNotFoundError, though it held rank 0's weights),
and Lightning's had no verdict on save_fails (its NotLoaded, a skip only when the adapter knew the class)."""
import pytest

from conftest import RACE_LAB, ROOT, side_by_side
from helpers.markdown import PYTHON_BLOCK

LOAD_BEST = {"seed": "clean", "save_fails": "save_failed", "no_shared_fs": "clean"}
RESUME = {"crash_mid_save": "clean", "resume_disagree": "clean"}
COPIES = {  # framework -> (the class users name, the built-in fix's verdicts on the scenarios it is run through,
    # what else the copy's command names). On the resume too: the Trainer's train(resume_from_checkpoint=True) picks
    # as the built-in fix's does; Lightning's fit is given what the copy's rank0_last_checkpoint picks, as its page has it
    "transformers": ("Rank0LeadsTrainer", {**LOAD_BEST, **RESUME}, []),
    "lightning": ("Rank0LeadsCheckpointIO", {**LOAD_BEST, **RESUME}, ["fix.ckpt_path=copied.rank0_leads.rank0_last_checkpoint"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("framework", list(COPIES))
def test_the_fix_users_copy_gets_the_built_in_fix_verdicts(tmp_path, framework):
    name, expected, more = COPIES[framework]
    scenarios = ",".join(expected)
    (tmp_path / "copied").mkdir()
    (tmp_path / "copied" / "__init__.py").write_text("")
    [code] = PYTHON_BLOCK.findall((ROOT / "docs" / "fixes" / f"{framework}.md").read_text())
    (tmp_path / "copied" / "rank0_leads.py").write_text(code)
    common = [RACE_LAB, "-m", f"framework={framework}", "world_size=2", "skew.end_when_settled=true",
              f"scenario={scenarios}"]
    launches = side_by_side(tmp_path, {
        "copy": ([*common, "fix=own", f"fix._target_=copied.rank0_leads.{name}", *more,
                  f"hydra.sweep.dir={tmp_path / 'copy'}"],
                 tmp_path / "copy"),
        "built_in": ([*common, "fix=rank0_leads", f"hydra.sweep.dir={tmp_path / 'built_in'}"], tmp_path / "built_in"),
    }, deadline_s=900, cwd=tmp_path, env={"PYTHONPATH": ""})
    verdicts = {}
    for how, launch in launches.items():
        assert launch.rc == 0, launch.out[-3000:]
        verdicts[how] = {s["config"]["scenario"]: s["verdict"] for s, _ in launch.jobs()}
    assert verdicts["copy"] == verdicts["built_in"]
    assert verdicts["built_in"] == expected
