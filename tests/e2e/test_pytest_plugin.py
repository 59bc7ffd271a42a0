"""race-lab in a team's own test suite (race_lab/, the `pytest11` entry point): a small user project outside the
repository, run by pytest as its team would run it, with the race_lab_check fixture. A class that holds every
scenario it is checked on passes its test; a class that races fails it, with the card as the failure. The checks
write under each test's tmp_path, not into the project."""
import re
import shutil

import pytest

from conftest import ROOT
from helpers.markdown import PYTHON_BLOCK

USER_TESTS = '''
def test_our_lightning_checkpoint_io_is_safe(race_lab_check):
    result = race_lab_check("lightning", "own", "copied.rank0_leads.Rank0LeadsCheckpointIO",
                            "check.repeats=1", "check.restarts=false")
    assert result.verdict == "safe" and (result.folder / "check.json").exists()


def test_our_fastai_export_is_safe(race_lab_check):
    race_lab_check("fastai", "own", "my_checkpoints.own_file_fastai.ExportingSaveModelCallback",
                   "check.repeats=1", "check.disks=shared")
'''


@pytest.mark.slow
def test_a_teams_suite_passes_on_a_safe_class_and_fails_with_the_card_on_a_racing_one(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "")  # the project's own folder only, as its team runs pytest
    (pytester.path / "copied").mkdir()
    (pytester.path / "copied" / "__init__.py").write_text("")
    [code] = PYTHON_BLOCK.findall((ROOT / "docs" / "fixes" / "lightning.md").read_text())
    (pytester.path / "copied" / "rank0_leads.py").write_text(code)  # docs/fixes/lightning.md's file, as copied
    shutil.copytree(ROOT / "examples" / "my_checkpoints", pytester.path / "my_checkpoints")
    pytester.makepyfile(test_checkpoints=USER_TESTS)
    done = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", timeout=1500)
    done.assert_outcomes(passed=1, failed=1)
    out = done.stdout.str()
    assert "FAILED test_checkpoints.py::test_our_fastai_export_is_safe" in out and "race_lab.check.Unsafe" in out
    assert re.search(r"seed +load_best +raced: race 1/1", out)  # the card's row, in the failure
    assert "race: rank 1 tried to load (your code's read of models/weight" in out  # the gist, cut to the width
    assert not (pytester.path / "runs").exists()  # nothing piled up in the project
