"""race-lab in a team's own test suite (race_lab/, the `pytest11` entry point): a small user project outside the
repository, run by pytest as its team would run it, with the race_lab_check fixture. Its class races: its test fails,
with the card as the failure, and the card names the change. The team makes it (docs/fixes/lightning.md's file copied
into the project, the class's base made that file's class) and runs the same test again: it passes. The checks
write under each test's tmp_path, not into the project."""
import re
import shutil

import pytest

from conftest import ROOT
from helpers.markdown import PYTHON_BLOCK

TARGET = "my_checkpoints.lightning_io.PatientCheckpointIO"  # the team's CheckpointIO: a load that waits for its file
USER_TEST = f'''
def test_our_checkpoint_io_is_safe(race_lab_check):
    result = race_lab_check("lightning", "own", "{TARGET}",
                            "check.repeats=1", "check.restarts=false", "check.disks=shared")
    assert result.verdict == "safe" and (result.folder / "check.json").exists()
'''
TEST_ID = "test_checkpoints.py::test_our_checkpoint_io_is_safe"


def make_the_change_the_card_names(project):
    """fix=rank0_leads, as a team applies it to its own class: docs/fixes/lightning.md's file copied into its package,
    and its class built on that file's Rank0LeadsCheckpointIO instead of Lightning's TorchCheckpointIO."""
    [code] = PYTHON_BLOCK.findall((ROOT / "docs" / "fixes" / "lightning.md").read_text())
    (project / "my_checkpoints" / "rank0_leads.py").write_text(code)
    module = project / "my_checkpoints" / "lightning_io.py"
    before = module.read_text()
    after = before.replace("from pytorch_lightning.plugins import TorchCheckpointIO\n",
                           "from my_checkpoints.rank0_leads import Rank0LeadsCheckpointIO\n")
    after = after.replace("class PatientCheckpointIO(TorchCheckpointIO):",
                          "class PatientCheckpointIO(Rank0LeadsCheckpointIO):")
    assert after.count("Rank0LeadsCheckpointIO") == 2 and "import TorchCheckpointIO" not in after, "the example changed"
    module.write_text(after)


@pytest.mark.slow
def test_a_teams_test_fails_with_the_card_on_its_racing_class_and_passes_once_the_class_has_the_fix(pytester,
                                                                                                  monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "")  # the project's own folder only, as its team runs pytest
    shutil.copytree(ROOT / "examples" / "my_checkpoints", pytester.path / "my_checkpoints")
    pytester.makepyfile(test_checkpoints=USER_TEST)
    raced = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", timeout=900)
    raced.assert_outcomes(failed=1)
    out = raced.stdout.str()
    assert f"{TEST_ID} FAILED" in out and "race_lab.check.Unsafe" in out
    assert re.search(r"save_fails +load_best +raced: race 1/1", out)  # the card's row, in the failure
    assert ("unsafe: raced in 1 of 6 (save_fails); the change that holds all 6: fix=rank0_leads "
            "(docs/fixes/lightning.md)") in out  # and its answer: the change to make

    make_the_change_the_card_names(pytester.path)
    held = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v", timeout=900)
    held.assert_outcomes(passed=1)
    assert f"{TEST_ID} PASSED" in held.stdout.str()
    assert not (pytester.path / "runs").exists()  # nothing piled up in the project
