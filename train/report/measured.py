"""Which fixes hold which scenario, as measured: the matrices kept in docs/measured/ (each a sweep's matrix.csv,
copied as it was written: `make measured FRAMEWORK=<name>`). race-lab check reads them to say, for a race, the fixes
that hold it, and which one fix holds every scenario. Nothing here is written by hand: a cell counts only as
its runs gave it.
"""
import csv
from pathlib import Path

from train.report.matrix import FIX_ORDER

MEASURED = Path(__file__).resolve().parents[2] / "docs" / "measured"
FIRST_CHOICE = "rank0_leads"  # of several fixes that hold every scenario, the one written to hold them all


def read_measured(framework: str, folder: Path = MEASURED) -> dict:
    """scenario -> fix -> (counted, races, not_counted) for `framework`, from every matrix csv in `folder`. Cells
    measured in several files add up."""
    cells = {}
    for path in sorted(Path(folder).glob("*.csv")):
        with open(path, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                if row.get("framework") != framework or not row.get("counted"):
                    continue
                before = cells.setdefault(row["scenario"], {}).get(row["fix"], (0, 0, 0))
                cells[row["scenario"]][row["fix"]] = (before[0] + int(row["counted"]), before[1] + int(row["races"]),
                                                      before[2] + int(row.get("not_counted") or 0))
    return cells


def holds(cell) -> bool:
    """A fix holds a scenario when every run of it counted and none raced."""
    counted, races, not_counted = cell
    return counted > 0 and races == 0 and not_counted == 0


def _fix_order(fixes) -> list:
    rank = {fix: i for i, fix in enumerate([FIRST_CHOICE, *FIX_ORDER])}
    return sorted(fixes, key=lambda fix: (rank.get(fix, len(rank)), fix))


def holds_with(measured: dict, scenario: str) -> list:
    """The fixes measured to hold `scenario`, the first choice first."""
    return _fix_order(fix for fix, cell in measured.get(scenario, {}).items() if holds(cell))


def recommended(measured: dict, scenarios: list):
    """The one fix measured to hold every scenario in `scenarios`, or None."""
    if not scenarios:
        return None
    common = set.intersection(*(set(holds_with(measured, s)) for s in scenarios))
    return _fix_order(common)[0] if common else None


def holds_with_run(summary: dict, folder: Path = MEASURED) -> list:
    """For a run that raced: the fixes measured to hold its scenario in its framework (summary.json's
    `holds_with`); [] for any other verdict."""
    cfg = summary.get("config") or {}
    if summary.get("verdict") != "race" or not cfg.get("scenario"):
        return []
    return holds_with(read_measured((cfg.get("framework") or {}).get("name", "fastai"), folder), cfg["scenario"])


def advice(summary: dict) -> str:
    """The console's line under a race: what to change, as measured."""
    held = summary.get("holds_with") or []
    framework = (summary.get("config") or {}).get("framework", {}).get("name", "fastai")
    return (f"\nwhat holds it in {framework}, as measured (docs/measured/): "
            + ", ".join(f"fix={fix}" for fix in held)) if held else ""
