"""Reading what runs wrote: find the run dirs under a dir, and read each one's summary.json (or say why it cannot be read)."""
import json
from pathlib import Path

NOT_RUN = "not_run.json"  # in a sweep dir: the jobs left out as n/a before any ran (train/launch/cells.py)


def load_summary(run_dir) -> dict:
    path = Path(run_dir) / "summary.json"
    if not path.exists():
        raise SystemExit(f"error: {path} not found (not a finished run dir?)")
    return json.loads(path.read_text())


def find_runs(root: Path) -> list:
    """Run dirs (each has .hydra/) at or below root, in job order; a node's own dir inside a run
    (nodes/node<K>/, launch.all_nodes_here) is part of that run, not one of its own."""
    found = {p.parent for p in root.rglob(".hydra") if p.is_dir()}
    runs = [r for r in found if not any(parent in found for parent in r.parents)]

    def order(run):
        rel = run.relative_to(root).parts
        head = rel[0].split("-")[0] if rel else ""
        return (int(head) if head.isdigit() else -1, str(run))
    return sorted(runs, key=order)


def unreadable(e: BaseException) -> str:
    """Why a record could not be used, in a few words."""
    if isinstance(e, json.JSONDecodeError):
        return "summary.json is not whole JSON"
    if isinstance(e, FileNotFoundError):
        return f"no {Path(e.filename).name if e.filename else 'file'}"
    return f"{type(e).__name__}: {str(e)[:80]}"


def read_summary(run: Path):
    """summary.json as a dict, or None where there is none, or one cut short (a crash while writing)."""
    try:
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and {"config", "status", "verdict", "ranks"} <= set(summary) else None


def fix_name(config: dict) -> str:
    """The fix a run's config names (a run recorded before the axis was called fix has it under `callback`); a
    class of yours by its name too: `own (PatientCheckpointIO)`."""
    fix = config.get("fix") or config.get("callback") or {}
    name, target = fix.get("name"), fix.get("_target_")
    return f"{name} ({target.rpartition('.')[2]})" if name == "own" and target else name


def read_not_run(root: Path) -> list:
    """The summaries of the jobs a sweep left out as n/a, none ran (its not_run.json); none: []."""
    try:
        found = json.loads((root / NOT_RUN).read_text())["n/a"]
    except FileNotFoundError:
        return []
    return [s for s in found if isinstance(s, dict) and {"config", "status", "verdict", "explanation"} <= set(s)]
