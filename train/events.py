"""Append-only event logs, one JSON object per line.

Every rank writes events/rank<N>.jsonl and the launcher writes events/launcher.jsonl.
Each line is flushed and fsynced as it is written, so a process that dies leaves
every event it reached.
"""
import json
import os
import time
from pathlib import Path

LAUNCHER = "launcher"


def events_dir(run_dir) -> Path:
    return Path(run_dir) / "events"


class EventLog:
    def __init__(self, run_dir, rank, name=None):
        """rank: an int for a rank, or LAUNCHER; name: the file's, if not rank<N> or launcher."""
        self.rank = rank
        name = name or (f"rank{rank}" if rank != LAUNCHER else LAUNCHER)
        path = events_dir(run_dir) / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")

    def record(self, event: str, **fields) -> dict:
        entry = {"t": time.time(), "rank": self.rank, "event": event, **fields}
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        return entry

    def close(self):
        self._file.close()


def read_events(run_dir) -> list:
    """All events of a run, oldest first. A torn last line (a process killed mid-write) is skipped."""
    events = []
    for path in sorted(events_dir(run_dir).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return sorted(events, key=lambda e: e["t"])
