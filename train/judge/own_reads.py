"""Your code's reads of checkpoint files, as train/rank/observe.py saw them (file_op events with `by`, the frame
of your code that read): whoever's code it was, a read is judged by what it found. A rank's last read of a file
came too early when there was no file yet (missing), or when the file was written again after it (stale: the
inode, size or mtime it read differ from the file's as the rank ended, its file_state), unless the rank itself began
a save after the read: then the read was part of an earlier save (a digest of what was written, for a marker) and
what the rank ends with comes from later reads; an adapter's events judge those. Reads by race-lab's or a
framework's own code carry no `by`; their adapters' events judge them (load_best.py).
An exception that ended the rank's run and passed through your code (rank_error with `by`) is your code's failure,
judged by what it says: no file (missing), a file cut short or unreadable (corrupt), or else `raised`; never the
harness's (no verdict is for race-lab's own code failing)."""
from typing import Optional

from train.judge.vocabulary import Event, classify_load_error, last_event, load_error_sentence

YOUR_READ = "your code's read of "  # how the detail of a rank judged by its own read starts (explain.py reads it)
YOUR_RAISE = "your code raised "  # and of a rank whose run your code ended with an exception


def short_path(path: str) -> str:
    """The last two parts of a path: the folder and the file, as a reader knows them."""
    return "/".join(path.rstrip("/").split("/")[-2:])


def _version(state: Event) -> tuple[object, object, object]:
    return state.get("inode"), state.get("bytes"), state.get("mtime_ns")


def yours(mine: list[Event]) -> Optional[tuple[str, str]]:
    """(outcome, detail) when what your code did decides this rank: a read that came too early, or an exception
    your code raised; else None. mine: one rank's events."""
    return own_read(mine) or own_raise(mine)


def own_raise(mine: list[Event]) -> Optional[tuple[str, str]]:
    """(outcome, detail) when an exception that passed through your code ended this rank's run, else None."""
    raised = last_event(mine, "rank_error")
    if not raised or not raised.get("by"):
        return None
    outcome = classify_load_error(raised["error_type"], raised["message"])
    detail = f"{YOUR_RAISE}{load_error_sentence(raised['error_type'], raised['message'])}, in {short_path(raised['by'])}"
    return (outcome if outcome != "error" else "raised"), detail


def saved_since(mine: list[Event], t: float) -> bool:
    """Whether this rank began a save after time `t`."""
    return any(e["event"] == "save_start" and e["t"] > t for e in mine)


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
        if end and end.get("exists") and _version(end) != _version(read) and not saved_since(mine, read["t"]):
            sizes = f"({read.get('bytes')} bytes then, {end.get('bytes')} when the rank ended)"
            raised = own_raise(mine)
            if raised and raised[0] == "corrupt":  # what it read could not be loaded: it was being written
                return "corrupt", f"{YOUR_READ}{where}, came while it was being written {sizes}: {raised[1]}"
            return "stale", f"{YOUR_READ}{where}, came before its last write {sizes}"
    return None
