"""Your code's reads of checkpoint files, as train/rank/observe.py saw them (file_op events with `by`, the frame
of your code that read): whoever's code it was, a read is judged by what it found. A rank's last read of a file
came too early when there was no file yet (missing), or when the file was written again after it (stale: the
inode, size or mtime it read differ from the file's as the rank ended, its file_state). Reads by race-lab's or a
framework's own code carry no `by`; their adapters' events judge them (load_best.py)."""
from typing import Optional

from train.judge.vocabulary import Event

YOUR_READ = "your code's read of "  # how the detail of a rank judged by its own read starts (explain.py reads it)


def short_path(path: str) -> str:
    """The last two parts of a path: the folder and the file, as a reader knows them."""
    return "/".join(path.rstrip("/").split("/")[-2:])


def _version(state: Event) -> tuple[object, object, object]:
    return state.get("inode"), state.get("bytes"), state.get("mtime_ns")


def own_read(mine: list[Event]) -> Optional[tuple[str, str]]:
    """(outcome, detail) when this rank's code of yours last read a checkpoint file too early, else None.
    mine: one rank's events."""
    last: dict[str, Event] = {}
    for e in mine:
        if e["event"] == "file_op" and e.get("op") == "open" and e.get("mode") == "r" and e.get("by"):
            last[e["path"]] = e
    ends = {e["path"]: e for e in mine if e["event"] == "file_state"}
    for path, read in last.items():
        where = f"{short_path(path)}, read in {short_path(read['by'])}"
        if not read.get("exists"):
            return "missing", f"{YOUR_READ}{where}, found no file"
        end = ends.get(path)
        if end and end.get("exists") and _version(end) != _version(read):
            return "stale", (f"{YOUR_READ}{where}, came before its last write ({read.get('bytes')} bytes "
                             f"then, {end.get('bytes')} when the rank ended)")
    return None
