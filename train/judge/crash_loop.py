"""A crash loop, named the moment it is certain: two attempts in a row that died in the same place on the same file
(the same failure, the same file, the same kind of error) will be followed by a third that does the same, so the
launcher ends the run there (train/launch/elastic.py), as it ends a hang, instead of using up every restart.

Pure functions over event records. A planted kill (the scenario's `crash` event) is the fault, not a loop.
"""
from typing import Any, Optional

from train.judge.vocabulary import FAILURE_EVENTS, Event, classify_load_error, file_name


def _attempt(e: Event) -> int:
    return int(e.get("attempt", 0))


def first_failure(events: list[Event], n: int) -> Optional[Event]:
    """The first failure any rank recorded in attempt n (a planted crash included), or None."""
    failed = [e for e in events if isinstance(e["rank"], int) and _attempt(e) == n
              and e["event"] in FAILURE_EVENTS]
    return min(failed, key=lambda e: e["t"], default=None)


def place(failure: Event) -> tuple[str, Any, Any]:
    """Where and how an attempt died, whichever rank it was: (what it did, the file, the kind of error)."""
    if failure["event"] == "load_error":
        kind = classify_load_error(failure["error_type"], failure["message"], failure.get("in_reader", False))
        return "reading", failure.get("path"), kind
    if failure["event"] == "rotate_error":
        return "deleting", failure.get("path"), failure["error_type"]
    if failure["event"] == "hang":
        return "waiting in", failure.get("sync"), "hung"
    return f"in its {failure.get('how', 'training')}", failure.get("path"), failure.get("error_type")


def crash_loop(events: list[Event]) -> Optional[dict[str, Any]]:
    """The crash loop these events prove, or None: the two newest attempts that failed, one right after the other,
    died in the same place, and neither was a planted crash. Returns {attempts: [n-1, n], doing, file, kind,
    sentence}. An attempt begun since, that has not failed (yet), is passed over: a launcher that reads these
    late, once the agent has begun the next attempt, still sees the two that proved it."""
    attempts = sorted({_attempt(e) for e in events if isinstance(e["rank"], int)})
    failed = {n: f for n in attempts if (f := first_failure(events, n))}
    if len(failed) < 2:
        return None
    before, newest = sorted(failed)[-2:]
    if newest != before + 1:
        return None
    a, b = failed[before], failed[newest]
    if "crash" in (a["event"], b["event"]) or place(a) != place(b):
        return None
    doing, file, kind = place(b)
    where = f"{doing} {file_name(file)}" if file else doing
    return {"attempts": [before, newest], "doing": doing, "file": file, "kind": kind,
            "sentence": f"crash loop: every attempt dies {where} ({kind})"}
