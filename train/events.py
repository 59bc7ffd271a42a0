"""Append-only event logs, one JSON object per line.

Every rank writes events/rank<N>.jsonl and the launcher writes events/launcher.jsonl.
Each line is flushed and fsynced as it is written, so a process that dies leaves
every event it reached. A rank's file is opened for appending: a rank that torch elastic
restarts (launch.max_restarts) adds to what its earlier attempts left, and every rank event
carries `attempt`: 0 the first time, and the same number on every rank of one restart (the ranks agree on it as
they start, train/rank/worker.py agree_on_attempt; else the agent's own TORCHELASTIC_RESTART_COUNT).
"""
import json
import os
import threading
import time
from pathlib import Path

LAUNCHER = "launcher"

# Every event a log may hold, declared once: EventLog.record refuses any other name. Their fields and what each
# outcome means: train/judge/vocabulary.py. JUDGED: what the judge reads (tests/unit/test_events.py holds it to the
# judge's code); SHOWN: the rest, kept for the timeline, the logs and a reader of events/*.jsonl.
JUDGED = frozenset({
    # one rank
    "rank_start", "fit_start", "skew_start", "skew_end", "rank_misdetected", "save_start", "save_end", "save_error",
    "sync_enter", "sync_exit", "sync_error", "train_error", "hang", "skip", "load_attempt", "load_done", "load_error",
    "final", "crash", "interrupted", "rank_end",
    # the resume loop, sharded and async saves
    "loop_start", "resume", "rotate_error", "shard_write", "shard_read", "save_dispatch", "save_commit",
    # what any code did to checkpoint files (train/rank/observe.py)
    "file_op", "file_state", "rank_error",
    # the launcher
    "launch_start", "rank_failed", "signal", "launch_error", "launch_end", "crash_loop",
})
SHOWN = frozenset({"train_end", "read_delay_start", "read_delay_end", "slow_write_start", "slow_write_end", "rotate",
                   "stale_listing", "async_save_error", "ranks_returned", "file_watch"})
EVENTS = JUDGED | SHOWN


# One line at a time in this process, from any thread (the file observer's, an async save's) and any EventLog; a
# rank that takes a stop signal keeps it to the end (EventLog.record_last), so nothing it did after is recorded.
_WRITING = threading.Lock()
GIVE_UP_WAITING_S = 5.0  # record_last waits no longer than this for a write in progress (a hung disk)


def events_dir(run_dir) -> Path:
    return Path(run_dir) / "events"


_agreed = None  # the attempt every rank of this restart agreed on (set_attempt), once they have


def attempt() -> int:
    """This process's attempt: how often torch elastic has restarted the worker group before it. The number the
    ranks agreed on (set_attempt) once they have, else this node's agent's count (TORCHELASTIC_RESTART_COUNT),
    which can fall behind another node's (train/rank/worker.py agree_on_attempt)."""
    return _agreed if _agreed is not None else elastic_restart_count()


def elastic_restart_count() -> int:
    """This node's torch elastic agent's restart count, as it hands it to its ranks; 0 outside torch elastic."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))


def set_attempt(n: int):
    """From now on attempt() is n in this process (a rank sets it once, before its first event)."""
    global _agreed
    _agreed = n


class EventLog:
    def __init__(self, run_dir, rank, name=None):
        """rank: an int for a rank, or LAUNCHER; name: the file's, if not rank<N> or launcher."""
        self.rank = rank
        self.attempt = attempt() if rank != LAUNCHER else None  # the launcher outlives every attempt
        name = name or (f"rank{rank}" if rank != LAUNCHER else LAUNCHER)
        path = events_dir(run_dir) / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")

    def record(self, event: str, **fields) -> dict:
        with _WRITING:
            return self._write(event, fields)

    def record_last(self, event: str, **fields) -> dict:
        """Record this process's last event: no thread of it records anything after, so what a rank that took a
        stop signal did after taking it is never in its log. The caller exits at once."""
        if not _WRITING.acquire(timeout=GIVE_UP_WAITING_S):
            return {}
        return self._write(event, fields)

    def _write(self, event: str, fields: dict) -> dict:
        if event not in EVENTS:
            raise ValueError(f"event {event!r} is not one of train/events.py's EVENTS")
        entry = {"t": time.time(), "rank": self.rank, "event": event, **fields}  # its time taken in the lock: in order
        if self.attempt is not None:
            entry["attempt"] = self.attempt
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        return entry

    def close(self):
        self._file.close()


def is_record(entry) -> bool:
    """An event as EventLog writes it: a JSON object with a time, a rank and an event name."""
    return isinstance(entry, dict) and isinstance(entry.get("t"), (int, float)) and not isinstance(entry["t"], bool) \
        and isinstance(entry.get("rank"), (int, str)) and isinstance(entry.get("event"), str)


def read_events(run_dir, skipped: list = None) -> list:
    """All events of a run, oldest first. A line that is not a record (the torn last line of a process
    killed mid-write, garbage) is left out; with `skipped`, a reason for each is appended to it."""
    events = []
    for path in sorted(events_dir(run_dir).glob("*.jsonl")):
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as e:
            if skipped is not None:
                skipped.append(f"{path}: unreadable ({e.strerror or e})")
            continue
        for n, line in enumerate(lines, 1):
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                entry = None
            if is_record(entry):
                events.append(entry)
            elif skipped is not None and line.strip():
                skipped.append(f"{path.name} line {n}: not an event record (cut short by a crash?)")
    return sorted(events, key=lambda e: e["t"])
