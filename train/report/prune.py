"""Runs that do not pile up: a run that held keeps its records and loses the rest; a run that raced, failed or gave no
verdict is kept whole.

Its records are what the card, check.html, the report and a rerun need: summary.json (the verdict and the config),
events/ (what the judge reads: `python -m train.report --rejudge` judges them again, the report draws the timeline
again from them), .hydra/ (the composed config and overrides: the job's own command) and, for a run of several
nodes, each node's summary and events under nodes/. What goes: the ranks' logs/, the checkpoints the run wrote,
timeline.png and console.log. race-lab check prunes its folder when it ends (check.keep_runs=true: it keeps every
run whole); `race-lab prune [FOLDER ...] [--dry-run]` prunes what is already there (runs/ by default).
"""
import json
import shutil
import sys
from pathlib import Path

from train.report.check_card import HELD
from train.report.run_records import find_runs, read_summary

PRUNED = "pruned.json"  # in a pruned run: what went, so a reader of the folder is not left guessing
RECORDS = {".hydra", "events", "summary.json", "node_summary.json", PRUNED}
NODES = "nodes"  # nodes/node<K>/: one node's records of a run of several (train/report/node_records.py)
USAGE = "usage: race-lab prune [FOLDER ...] [--dry-run]   (FOLDER: runs/ by default)"


def size(path: Path) -> tuple:
    """(bytes, files) at or below path; a link counts as itself."""
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size, 1
    found = [p.lstat().st_size for p in path.rglob("*") if p.is_symlink() or p.is_file()]
    return sum(found), len(found)


def held(run: Path) -> bool:
    summary = read_summary(run)
    return summary is not None and summary.get("verdict") in HELD


def prunable(run: Path) -> list:
    """What pruning a run removes: everything but its records (RECORDS), in nodes/node<K>/ too. Nothing for a run
    that did not hold: a race, an error or a crash stays whole, to be read."""
    if not held(run):
        return []

    def beside_records(folder: Path) -> list:
        gone = []
        for path in sorted(folder.iterdir()):
            if path.name == NODES and path.is_dir() and not path.is_symlink():
                gone += [p for node in sorted(path.iterdir()) for p in
                         (beside_records(node) if node.is_dir() and not node.is_symlink() else [node])]
            elif path.name not in RECORDS:
                gone.append(path)
        return gone
    return beside_records(run)


def prune_run(run: Path, gone: list):
    for path in gone:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    removed = json.loads((run / PRUNED).read_text()) if (run / PRUNED).exists() else []
    listed = sorted({*removed, *(str(p.relative_to(run)) for p in gone)})
    (run / PRUNED).write_text(json.dumps(listed, indent=1) + "\n", encoding="utf-8")


def prune(folder: Path, dry_run: bool = False) -> dict:
    """Prune every run at or below folder that held. Returns the folder's size before and after (bytes, files) and
    how many runs were pruned; dry_run: what it would be, nothing removed."""
    folder = Path(folder)
    before = size(folder)
    bytes_gone = files_gone = runs = 0
    for run in find_runs(folder):
        gone = prunable(run)
        if not gone:
            continue
        runs += 1
        for path in gone:
            b, n = size(path)
            bytes_gone, files_gone = bytes_gone + b, files_gone + n
        if not dry_run:
            prune_run(run, gone)
    after = (before[0] - bytes_gone, before[1] - files_gone + runs) if dry_run else size(folder)  # + pruned.json
    return {"before": before, "after": after, "runs": runs}


def report_again(folder: Path):
    """A sweep's report and matrix (report.md, matrix.html) made again from its records, where it had one: its links
    to what a pruned run no longer has are gone. Its runs' timelines are not drawn again."""
    if (folder / "report.csv").exists():
        from train.report.runs import write_report

        write_report(folder, drawn=set(find_runs(folder)))


def megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def said(folder: Path, found: dict, dry_run: bool) -> str:
    (b0, f0), (b1, f1) = found["before"], found["after"]
    verb = "would prune" if dry_run else "pruned"
    return (f"{folder}: {verb} {found['runs']} run(s) that held: {megabytes(b0)} in {f0} files -> "
            f"{megabytes(b1)} in {f1} files")


def main(argv: list) -> int:
    """race-lab prune: every folder given (runs/ by default), each sweep or check in it with its report again."""
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    dry_run = "--dry-run" in argv
    unknown = [a for a in argv if a.startswith("-") and a != "--dry-run"]
    folders = [Path(a) for a in argv if not a.startswith("-")] or [Path("runs")]
    missing = [f for f in folders if not f.is_dir()]
    if unknown or missing:
        print(f"error: {unknown[0] + ': not an option' if unknown else f'{missing[0]}: no such folder'}; {USAGE}",
              file=sys.stderr)
        return 2
    for folder in folders:
        found = prune(folder, dry_run)
        if not dry_run and found["runs"]:
            for report in sorted({p.parent for p in folder.rglob("report.csv")}):
                report_again(report)
            found["after"] = size(folder)
        print(said(folder, found, dry_run), flush=True)
    return 0
