"""What each rank saw, and the run's verdict: pure functions over event records.

Rank events (events/rank<N>.jsonl): rank_start, fit_start, skew_start, skew_end,
save_start, save_end{digest, bytes}, train_end, barrier_enter, barrier_exit,
barrier_error{error_type, message, timed_out}, poll_enter, poll_exit,
poll_timeout{seconds}, load_attempt{bytes: the file's size then}, load_done{digest},
load_error{error_type, message}, crash, rank_end.
A rank is `aborted` when the launcher stopped it after a peer failed, or when its
barrier broke because a peer died (whichever comes first is a matter of timing).
Launcher events (events/launcher.jsonl): launch_start, rank_failed{failed_rank, exitcode},
launch_end{status: ok | failed | interrupted | timeout}.
"""
import re
from dataclasses import asdict, dataclass, field

OUTCOMES = ("loaded", "missing", "stale", "corrupt", "timeout", "aborted", "error")

# What torch.load says about a partly written or unreadable file.
_CORRUPT_TYPES = {"UnpicklingError", "EOFError", "BadZipFile"}
_CORRUPT_TEXT = ("PytorchStreamReader", "zip archive", "central directory", "unexpected EOF", "truncated")


@dataclass
class RankOutcome:
    rank: int
    outcome: str
    detail: str = ""
    timings: dict = field(default_factory=dict)  # seconds since launch_start


@dataclass
class Verdict:
    verdict: str  # clean | race
    explanation: str
    ranks: list

    def as_dict(self):
        return {"verdict": self.verdict, "explanation": self.explanation,
                "ranks": [asdict(r) for r in self.ranks]}


def _last(events, name):
    found = [e for e in events if e["event"] == name]
    return found[-1] if found else None


def _launch_status(launcher_events):
    end = _last(launcher_events, "launch_end")
    return end["status"] if end else None


def saves(events) -> list:
    """Every completed save of the run, oldest first."""
    return [e for e in events if e["event"] == "save_end"]


def is_corrupt_read(error_type: str, message: str) -> bool:
    # torch 2.14's torch.load of the first half of a checkpoint raises OSError EINVAL
    half_file = error_type == "OSError" and "Invalid argument" in message
    return half_file or error_type in _CORRUPT_TYPES or any(s in message for s in _CORRUPT_TEXT)


def classify_load_error(error_type: str, message: str) -> str:
    if error_type == "FileNotFoundError":
        return "missing"
    if is_corrupt_read(error_type, message):
        return "corrupt"
    return "error"


def classify_rank(rank: int, events: list) -> RankOutcome:
    """events: the whole run's events (all ranks and the launcher)."""
    mine = [e for e in events if e["rank"] == rank]
    launcher = [e for e in events if e["rank"] == "launcher"]
    written = saves(events)
    last_written = written[-1] if written else None
    timings = rank_timings(mine, events)

    done = _last(mine, "load_done")
    if done:
        if last_written and done["digest"] == last_written["digest"]:
            return RankOutcome(rank, "loaded", "", timings)
        older = [s for s in written if s["digest"] == done["digest"]]
        where = f"the epoch-{older[-1]['epoch']} save" if older else "a file this run never wrote"
        return RankOutcome(rank, "stale", f"loaded {where}", timings)

    failed = _last(mine, "load_error")
    if failed:
        outcome = classify_load_error(failed["error_type"], failed["message"])
        seen = (_last(mine, "load_attempt") or {}).get("bytes")
        if outcome == "error" and last_written and seen is not None and seen < last_written.get("bytes", 0):
            outcome = "corrupt"  # it read a file shorter than the finished checkpoint
        return RankOutcome(rank, outcome, f"{failed['error_type']}: {short(failed['message'])}", timings)

    polled = _last(mine, "poll_timeout")
    if polled:
        return RankOutcome(rank, "timeout", f"no checkpoint appeared within {polled['seconds']} s", timings)

    failures = [e for e in launcher if e["event"] == "rank_failed"]
    barrier = _last(mine, "barrier_error")
    if barrier:
        why = f"barrier: {barrier['error_type']}: {short(barrier['message'])}"
        if barrier.get("timed_out"):
            return RankOutcome(rank, "timeout", why, timings)
        peers = sorted({e["failed_rank"] for e in failures} - {rank})
        if peers:  # its barrier broke because a peer died: the peer's failure, not its own
            return RankOutcome(rank, "aborted", f"its barrier broke when {_ranks(peers)} died", timings)
        if _launch_status(launcher) == "interrupted":
            return RankOutcome(rank, "aborted", "its barrier broke when the run was interrupted", timings)
        return RankOutcome(rank, "error", why, timings)

    died = [e for e in failures if e["failed_rank"] == rank]
    if died:
        return RankOutcome(rank, "error", died[-1].get("message") or f"exit code {died[-1]['exitcode']}", timings)
    status = _launch_status(launcher)
    if status == "timeout":
        return RankOutcome(rank, "timeout", "stopped by the launcher at timeout.run_s", timings)
    if not _last(mine, "rank_end") and status in ("failed", "interrupted", None):
        why = "after a peer failed" if status == "failed" else "on interrupt" if status == "interrupted" else ""
        return RankOutcome(rank, "aborted", f"stopped by the launcher {why}".strip(), timings)
    return RankOutcome(rank, "error", "ended without loading", timings)


def rank_timings(mine: list, events: list) -> dict:
    """Seconds since launch_start for this rank's milestones, and how its load stood against the last save."""
    start = _last(events, "launch_start")
    t0 = start["t"] if start else min(e["t"] for e in events)
    out = {}
    for name in ("fit_start", "train_end", "save_start", "save_end", "barrier_enter", "barrier_exit",
                 "barrier_error", "poll_enter", "poll_exit", "poll_timeout", "load_attempt", "load_done",
                 "load_error", "rank_end"):
        e = _last(mine, name)
        if e:
            out[name] = round(e["t"] - t0, 3)
    for kind, ends in (("barrier", ("barrier_exit", "barrier_error")), ("poll", ("poll_exit", "poll_timeout"))):
        left = next((out[e] for e in ends if e in out), None)
        if f"{kind}_enter" in out and left is not None:
            out["wait"] = round(left - out[f"{kind}_enter"], 3)  # how long its sync held it
    written = saves(events)
    attempt = _last(mine, "load_attempt")
    if written and attempt:
        # negative: this rank started reading before the last save had ended
        out["load_after_save_end"] = round(attempt["t"] - written[-1]["t"], 3)
    return out


def short(message: str) -> str:
    """The gist of an error message: no source-location prefix, first sentence only."""
    message = re.sub(r"^\[[^\]]*\]\s*", "", message)
    return message.split(". ")[0][:120]


def _ranks(ranks):
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _secs(x):
    return f"{x:.1f}" if abs(x) >= 0.95 else f"{x:.2f}"


def _span(values):
    lo, hi = _secs(min(values)), _secs(max(values))
    return f"{lo} s" if lo == hi else f"{lo}-{hi} s"


def explain(outcomes: list, events: list) -> str:
    """One sentence on what happened, worst news first."""
    by = {}
    for o in outcomes:
        by.setdefault(o.outcome, []).append(o)
    written = saves(events)
    saver = f"rank {written[-1]['rank']}" if written else "the saving rank"

    def early(group):
        leads = [-o.timings["load_after_save_end"] for o in group if "load_after_save_end" in o.timings]
        return leads if leads and min(leads) > 0 else None

    def first_error(group):
        return group[0].detail.split(":")[0] if group[0].detail else "error"

    parts = []
    for name in ("missing", "corrupt", "stale"):
        group = by.get(name, [])
        if not group:
            continue
        who = _ranks(o.rank for o in group)
        leads = early(group)
        what = {"missing": "tried to load", "corrupt": "read a partly written checkpoint",
                "stale": "loaded an older checkpoint"}[name]
        if name == "stale":
            what += f" ({group[0].detail.removeprefix('loaded ')})"
        when = f" {_span(leads)} before {saver} finished saving" if leads else \
            (" and no save finished" if not written else "")
        why = f" ({first_error(group)})" if name != "stale" else ""
        parts.append(f"{who} {what}{when}{why}")
    if by.get("timeout"):
        waits = [o.timings["wait"] for o in by["timeout"] if "wait" in o.timings]
        after = f" after {_span(waits)}" if waits else ""
        parts.append(f"{_ranks(o.rank for o in by['timeout'])} timed out{after} ({by['timeout'][0].detail})")
    if by.get("error"):
        parts.append("; ".join(f"rank {o.rank} failed ({o.detail})" for o in by["error"]))
    if by.get("aborted"):
        end = _last(events, "launch_end")
        why = "by an interrupt" if end and end["status"] == "interrupted" else "after a peer failed"
        parts.append(f"{_ranks(o.rank for o in by['aborted'])} stopped {why}")
    if parts:
        return "race: " + "; ".join(parts)

    others = [o for o in outcomes if not written or o.rank != written[-1]["rank"]]
    after = [o.timings["load_after_save_end"] for o in others if "load_after_save_end" in o.timings]
    tail = f"; {_ranks(o.rank for o in others)} started loading {_span(after)} after the save ended" \
        if others and after and min(after) >= 0 else ""
    return f"clean: every rank loaded the last checkpoint {saver} wrote{tail}"


def judge(events: list, world_size: int) -> Verdict:
    """The run's verdict: clean when every rank loaded the last checkpoint written, else race."""
    outcomes = [classify_rank(r, events) for r in range(world_size)]
    verdict = "clean" if all(o.outcome == "loaded" for o in outcomes) else "race"
    return Verdict(verdict, explain(outcomes, events), outcomes)
