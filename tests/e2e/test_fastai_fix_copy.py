"""docs/fixes/fastai.md's file (rank0_leads.py: a SaveModelCallback subclass on fastai's public API), copied byte for
byte into a folder outside the repository and run from there as fix=own with no PYTHONPATH, gets fix=rank0_leads's
verdict on each scenario. The copy is another class object than race-lab's, so it is taken for its methods (fastai's
framework.py declares them) and observed as race-lab's is (observed.py's callback_for), never by its name. Before, it
was refused: not a subclass of race-lab's RaceSaveModelCallback."""
import pytest

from conftest import RACE_LAB, ROOT, side_by_side
from helpers.markdown import PYTHON_BLOCK

SCENARIOS = "seed,stale,save_fails,no_shared_fs"


@pytest.mark.slow
def test_the_fastai_fix_users_copy_gets_the_built_in_fix_verdicts(tmp_path):
    (tmp_path / "copied").mkdir()
    (tmp_path / "copied" / "__init__.py").write_text("")
    [code] = PYTHON_BLOCK.findall((ROOT / "docs" / "fixes" / "fastai.md").read_text())
    (tmp_path / "copied" / "rank0_leads.py").write_text(code)
    common = [RACE_LAB, "-m", "framework=fastai", "world_size=2", "skew.end_when_settled=true", f"scenario={SCENARIOS}"]
    [launch] = side_by_side(tmp_path, {
        "copy": ([*common, "fix=own", "fix._target_=copied.rank0_leads.Rank0LeadsSaveModelCallback",
                  f"hydra.sweep.dir={tmp_path / 'copy'}"], tmp_path / "copy"),
    }, deadline_s=900, cwd=tmp_path, env={"PYTHONPATH": ""}).values()
    assert launch.rc == 0, launch.out[-3000:]
    # fix=rank0_leads's verdicts on these scenarios: tests/helpers/matrix_expected.py, which the matrix test holds
    assert {s["config"]["scenario"]: s["verdict"] for s, _ in launch.jobs()} == {
        "seed": "clean", "stale": "clean", "save_fails": "save_failed", "no_shared_fs": "clean"}
