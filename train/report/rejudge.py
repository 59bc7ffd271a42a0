"""Judge recorded runs again with today's judge: judging is pure functions over the event records, so a run's
verdict can be brought up to date without running it again (`python -m train.report --rejudge DIR`)."""
from pathlib import Path

from train.events import read_events
from train.judge.verdict import judge
from train.report.files import write_json_atomic
from train.report.measured import holds_with_run
from train.report.run_records import find_runs, read_summary

NOT_JUDGED = ("n/a", "interrupted")  # a cell not run, or a run stopped before its verdict: nothing to judge


def rejudge(root: Path) -> list:
    """Every run at or below root whose summary.json has a verdict: judged again from its events; its summary
    rewritten in place (atomically) where the verdict changed. Returns (run, before, after) for each change."""
    changed = []
    for run in find_runs(Path(root)):
        summary = read_summary(run)
        if summary is None or summary["verdict"] in NOT_JUDGED or summary["status"] in NOT_JUDGED:
            continue
        verdict = judge(read_events(run), summary["config"]["world_size"]).as_dict()
        updated = {**summary, **verdict}
        updated["holds_with"] = holds_with_run(updated)
        if updated != summary:
            write_json_atomic(run / "summary.json", updated)
        if verdict["verdict"] != summary["verdict"]:
            changed.append((run, summary["verdict"], verdict["verdict"]))
    return changed
