"""pytest's side of race-lab (the `pytest11` entry point `race_lab`): the `race_lab_check` fixture is
race_lab.check with its folder under the test's tmp_path, so a suite's checks do not pile up in the project:

    def test_our_checkpoint_io_is_safe(race_lab_check):
        race_lab_check(framework="lightning", fix="own", target="mypkg.io.MyIO")

An unsafe check fails the test with the card as its message."""

from pathlib import Path
from typing import Any, Callable

import pytest

from race_lab.check import CheckResult, check


@pytest.fixture
def race_lab_check(tmp_path: Path) -> Callable[..., CheckResult]:
    count = iter(range(1, 1_000))

    def run(framework: str, fix: str = "own", target: Any = None, *overrides: str, **options: Any) -> CheckResult:
        options.setdefault("folder", tmp_path / f"race-lab-check-{next(count)}")
        return check(framework, fix, target, *overrides, **options)

    return run
