"""Judging's vocabulary: the events it reads, each rank's outcome, the verdicts, and the small helpers every
judgement shares. Pure functions over event records; nothing here imports torch or the harness.

Rank events (events/rank<N>.jsonl): rank_start{node}, fit_start{node_local}, skew_start{at, seconds},
skew_end{settled} (settled: the stall ended early, every other rank past its load or waiting), read_delay_start,
read_delay_end, rank_misdetected, save_start, save_end{digest, bytes},
save_error{error_type, message}, train_end, sync_enter{how}, sync_exit{how},
sync_error{how, error_type, message, timed_out}, train_error{what, error_type, message, timed_out} (a framework's
call that raised on this rank and that no other event records, e.g. Lightning's validate after its load),
skip{reason}, load_attempt{bytes},
load_done{digest}, load_error{error_type, message}, final{digest}, crash, interrupted{signal}, rank_end,
save_dispatch{epoch, step, path, commits}, save_commit{epoch, step, path} (an async save's .metadata written, rank 0),
async_save_error{epoch, step, error_type, message} (an async save's Future raised, awaited or not),
hang{sync, n, waiting_for, peers: {rank: place}, certain_at} (train/toolkit/hang.py: its collective sync could never
end, because of where its peers were; the rank ended at once).
Launcher events (events/launcher.jsonl): launch_start, rank_failed{failed_rank, exitcode,
message, log}, signal{name}, launch_error{error_type, message},
launch_end{status: ok | failed | interrupted | timeout | harness_error}.

Each rank's outcome:
  loaded   it holds the weights of the last save, and nothing failed on it after its load
  skipped  it did not load: it looked and saw no file, or every rank agreed not to
  stale    it loaded an older checkpoint (an earlier save, or a file this run never wrote), or it read before the
           last save began and that save then failed (the file it read was older than the one being written)
  missing  it tried to load and there was no file
  corrupt  it read a partly written or unreadable file
  unsafe   the file held code, and weights_only=True refused to run it
  timeout  its sync waited past timeout.collective_s (or the run past timeout.run_s)
  hung     its sync could never end: a peer it waited for had gone on to the end, or waited in another sync;
           the rank was ended at once, not at the timeout (a race, not the harness's failure)
  aborted  the launcher stopped it after a peer failed, or its sync broke when a peer died
  crashed  it died where a scenario placed a crash (fault.crash_rank)
  raised   your code (fix=own) raised an exception that ended the rank's run, other than a missing or unreadable
           file (those are missing and corrupt): rank_error{error_type, message, at, by} (a race, not the harness's)
  error    it failed for a reason outside the experiment: the harness's failure, not a race
A rank whose load ended well and that then failed (its sync failed or could never end, its framework's call raised:
train_error, or it died) is never `loaded`: it is timeout, hung, aborted or error as above, its detail starting
"after its load, " (a stale rank stays stale, its detail saying what failed after).

A resume run (workload=resume: a loop_start event; every rank event has its `attempt`) is judged by
train/judge/resume.py: each rank's resumes (resume{epoch, step, path, digest}) against the newest checkpoint whose
save had ended before it (save_end{step, digest}), and the end of its last attempt; the run's `resume` record says
whether it finished, ran out of restarts (each attempt: the file it died on), or ended on diverged replicas.
  loaded   it finished, and every resume was from the newest complete checkpoint (or a fresh start with none)
  stale    it resumed from an older checkpoint than the newest complete one: steps redone; or from one this run
           never wrote (a tag an older run left: train/judge/shards.py's never_written)
  corrupt  its resume read a torn file, or loaded weights no complete save wrote: steps skipped
  mixed    every load returned, but the state it resumed mixed steps: its ranks resumed from different steps (or
           one started fresh beside peers that resumed), or a shard it read holds another step's write
           (train/judge/shards.py: shard_write{step, shard, digest}, shard_read{step, shard, digest, path})
  hung     its sync could never end (a hang event), in the last attempt
  missing  a file it read or deleted was not there (a peer deleted it first), or the run finished with its last
           save dispatched and never committed (save_dispatch{commits}, no save_commit{step} in that attempt)
  crashed  it was killed where the scenario placed the kill, in the last attempt

The verdict:
  clean        every rank holds the last checkpoint, and no save failed
  race         ranks diverged, hung, crashed or read the wrong file, or a save failed and a rank did not say so
  save_failed  the save failed and every rank says so (its own save_error, or a skip saying the save failed):
               none loaded and all hold the same weights
  error        the harness failed (a rank's own error, a launch that never ran): no verdict on the race
  interrupted  the run was stopped (Ctrl-C, SIGTERM) before it ended: no verdict on the race
"""
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional

Event = dict[str, Any]  # one record of events/*.jsonl: t, rank, event, and the event's fields

# the events a rank records where it failed, a planted kill (crash) included
FAILURE_EVENTS = ("crash", "load_error", "rotate_error", "train_error", "sync_error", "hang")
OUTCOMES = ("loaded", "skipped", "stale", "missing", "corrupt", "mixed", "unsafe", "timeout", "hung", "aborted", "crashed",
            "raised", "error")
VERDICTS = ("clean", "race", "save_failed", "error", "interrupted")

# What torch.load says about a partly written or unreadable file, and safetensors (at any cut of a file).
_CORRUPT_TYPES = {"UnpicklingError", "EOFError", "BadZipFile"}
_CORRUPT_TEXT = ("PytorchStreamReader", "zip archive", "central directory", "unexpected EOF", "truncated",
                 "metadata read failed",  # dcp's .metadata
                 "Error while deserializing header")  # safetensors, at any cut of a file
_UNSAFE_TEXT = "Weights only load failed"
_GLOBAL_OF_NOTHING = re.compile(r"GLOBAL (?![A-Za-z_][\w.]*\.[A-Za-z_])")  # a GLOBAL opcode cut short: no module.name
# A missing file that the framework only warned about (transformers' Trainer): the adapter's load_error says so.
ONLY_WARNED = "only warned"


@dataclass
class RankOutcome:
    rank: int
    outcome: str
    detail: str = ""
    timings: dict[str, float] = field(default_factory=dict)  # seconds since launch_start
    final_digest: str = ""  # the weights it ended the run with
    log: str = ""  # where its traceback is, when it failed


@dataclass
class Verdict:
    verdict: str
    explanation: str
    replicas: str  # agree | diverged | unknown: do the ranks end with the same weights?
    ranks: list[RankOutcome]
    resume: Optional[dict[str, Any]] = None  # a resume loop's run: its attempts and each rank's resumes (resume_judge)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verdict": self.verdict, "explanation": self.explanation, "replicas": self.replicas,
                     "ranks": [asdict(r) for r in self.ranks]}
        if self.resume is not None:
            out["resume"] = self.resume
        return out


def last_event(events: Iterable[Event], name: str) -> Optional[Event]:
    found = [e for e in events if e["event"] == name]
    return found[-1] if found else None


def worst_status(statuses: Iterable[str]) -> Optional[str]:
    """The run's status from its launchers' (one per node): the worst of them."""
    order = ("ok", "failed", "crash_loop", "timeout", "harness_error", "interrupted")
    return max(statuses, key=order.index, default=None)


def launch_status(launcher_events: Iterable[Event]) -> Optional[str]:
    return worst_status(e["status"] for e in launcher_events if e["event"] == "launch_end")


def saves(events: Iterable[Event]) -> list[Event]:
    """Every completed save of the run, oldest first."""
    return [e for e in events if e["event"] == "save_end"]


SAVE_FAILED = "save failed"  # what a rank's skip says when it was told the save failed (train/fixes.agree's why)


def says_save_failed(events: Iterable[Event], rank: Any) -> bool:
    """Whether this rank knows that the save failed: its own save raised (save_error), or it skipped the load
    saying so (every rank agreed not to load because rank 0's save failed), or it took a peer's weights and its
    code said so meanwhile (load_done's `said`: what it warned)."""
    return any(e["rank"] == rank and (e["event"] == "save_error" or
                                      (e["event"] == "skip" and SAVE_FAILED in e.get("reason", "")) or
                                      (e["event"] == "load_done" and SAVE_FAILED in e.get("said", "")))
               for e in events)


def is_corrupt_read(error_type: str, message: str) -> bool:
    # torch 2.14's torch.load of the first half of a checkpoint raises OSError EINVAL
    half_file = error_type == "OSError" and "Invalid argument" in message
    return half_file or error_type in _CORRUPT_TYPES or any(s in message for s in _CORRUPT_TEXT)


def classify_load_error(error_type: str, message: str, in_reader: bool = False) -> str:
    """in_reader: raised while the file's bytes were decoded (train/toolkit/'s error_fields)."""
    if error_type == "FileNotFoundError":
        return "missing"
    if error_type == "IsADirectoryError":  # a folder where the file should be: nothing readable
        return "corrupt"
    if _UNSAFE_TEXT in message:  # weights_only refused it: a global (code), or bytes that are no pickle at all
        return "corrupt" if "Unsupported operand" in message or _GLOBAL_OF_NOTHING.search(message) else "unsafe"
    if in_reader or is_corrupt_read(error_type, message):
        return "corrupt"
    return "error"


def load_error_sentence(error_type: str, message: str) -> str:
    """What a failed read says, even when the error itself says nothing (torch.load of an empty file:
    EOFError with no message)."""
    if short(message):
        return f"{error_type}: {short(message)}"
    if error_type == "EOFError":
        return "EOFError: the file ended before a whole checkpoint (empty or cut short)"
    return f"{error_type}, with no message"


def short(message: str) -> str:
    """The gist of an error message: no source-location prefix, first sentence only."""
    message = re.sub(r"^\[[^\]]*[/:][^\]]*\]\s*", "", message)  # e.g. "[../gloo/pair.cc:534] "
    return message.split(". ")[0][:120]


def ranks_text(ranks: Iterable[int]) -> str:
    ordered = sorted(ranks)
    return ("rank " if len(ordered) == 1 else "ranks ") + ", ".join(str(r) for r in ordered)


def secs(x: float) -> str:
    return f"{x:.1f}" if abs(x) >= 0.95 else f"{x:.2f}"


def span(values: Iterable[float]) -> str:
    values = list(values)
    lo, hi = secs(min(values)), secs(max(values))
    return f"{lo} s" if lo == hi else f"{lo}-{hi} s"


def file_name(path: Any) -> str:
    return str(path).rsplit("/", 1)[-1] if path else "no file"
