"""race-lab from Python: `race_lab.check(...)` runs `race-lab check` and returns its result, raising with the card
when the checkpoint code is unsafe; `pytest` gets the same as the `race_lab_check` fixture (race_lab/pytest_plugin.py,
registered through the `pytest11` entry point)."""

from race_lab.check import CheckError, CheckResult, Unsafe, check

__all__ = ["CheckError", "CheckResult", "Unsafe", "check"]
