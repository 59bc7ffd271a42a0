"""What each rank saw, and the run's verdict: pure functions over event records.

Rank events (events/rank<N>.jsonl): rank_start{node}, fit_start{node_local}, skew_start{at}, skew_end,
read_delay_start, read_delay_end, rank_misdetected, save_start, save_end{digest, bytes},
save_error{error_type, message}, train_end, sync_enter{how}, sync_exit{how},
sync_error{how, error_type, message, timed_out}, skip{reason}, load_attempt{bytes},
load_done{digest}, load_error{error_type, message}, final{digest}, crash, interrupted{signal}, rank_end,
hang{sync, n, waiting_for, peers: {rank: place}, certain_at} (train/hang.py: its collective sync could never
end, because of where its peers were; the rank ended at once).
Launcher events (events/launcher.jsonl): launch_start, rank_failed{failed_rank, exitcode,
message, log}, signal{name}, launch_error{error_type, message},
launch_end{status: ok | failed | interrupted | timeout | harness_error}.

Each rank's outcome:
  loaded   it holds the weights of the last save
  skipped  it did not load: it looked and saw no file, or every rank agreed not to
  stale    it loaded an older checkpoint (an earlier save, or a file this run never wrote)
  missing  it tried to load and there was no file
  corrupt  it read a partly written or unreadable file
  unsafe   the file held code, and weights_only=True refused to run it
  timeout  its sync waited past timeout.collective_s (or the run past timeout.run_s)
  hung     its sync could never end: a peer it waited for had gone on to the end, or waited in another sync;
           the rank was ended at once, not at the timeout (a race, not the harness's failure)
  aborted  the launcher stopped it after a peer failed, or its sync broke when a peer died
  crashed  it died where a scenario placed a crash (fault.crash_rank)
  error    it failed for a reason outside the experiment: the harness's failure, not a race

A run of the resume loop (framework=torch_loop: a loop_start event; every rank event has its `attempt`) is judged
by resume_judge: each rank's resumes (resume{epoch, step, path, digest}) against the newest checkpoint whose save
had ended before it (save_end{step, digest}), and the end of its last attempt; the run's `resume` record says
whether it finished, ran out of restarts (each attempt: the file it died on), or ended on diverged replicas.
  loaded   it finished, and every resume was from the newest complete checkpoint (or a fresh start with none)
  stale    it resumed from an older checkpoint than the newest complete one: steps redone
  corrupt  its resume read a torn file, or loaded weights no complete save wrote: steps skipped
  missing  a file it read or deleted was not there (a peer deleted it first)
  crashed  it was killed where the scenario placed the kill, in the last attempt

The verdict:
  clean        every rank holds the last checkpoint
  race         ranks diverged, hung, crashed or read the wrong file
  save_failed  the save failed and every rank agreed, so none loaded and all hold the same weights
  error        the harness failed (a rank's own error, a launch that never ran): no verdict on the race
  interrupted  the run was stopped (Ctrl-C, SIGTERM) before it ended: no verdict on the race
"""
import re
from dataclasses import asdict, dataclass, field

OUTCOMES = ("loaded", "skipped", "stale", "missing", "corrupt", "unsafe", "timeout", "hung", "aborted", "crashed",
            "error")
VERDICTS = ("clean", "race", "save_failed", "error", "interrupted")

# What torch.load says about a partly written or unreadable file, and safetensors (at any cut of a file).
_CORRUPT_TYPES = {"UnpicklingError", "EOFError", "BadZipFile"}
_CORRUPT_TEXT = ("PytorchStreamReader", "zip archive", "central directory", "unexpected EOF", "truncated",
                 "metadata read failed",  # dcp's .metadata
                 "Error while deserializing header")  # safetensors, at any cut of a file
_UNSAFE_TEXT = "Weights only load failed"
# A missing file that the framework only warned about (transformers' Trainer): the adapter's load_error says so.
ONLY_WARNED = "only warned"


@dataclass
class RankOutcome:
    rank: int
    outcome: str
    detail: str = ""
    timings: dict = field(default_factory=dict)  # seconds since launch_start
    final_digest: str = ""  # the weights it ended the run with
    log: str = ""  # where its traceback is, when it failed


@dataclass
class Verdict:
    verdict: str
    explanation: str
    replicas: str  # agree | diverged | unknown: do the ranks end with the same weights?
    ranks: list
    resume: dict = None  # a resume loop's run: its attempts and each rank's resumes (resume_judge)

    def as_dict(self):
        out = {"verdict": self.verdict, "explanation": self.explanation, "replicas": self.replicas,
               "ranks": [asdict(r) for r in self.ranks]}
        if self.resume is not None:
            out["resume"] = self.resume
        return out


def _last(events, name):
    found = [e for e in events if e["event"] == name]
    return found[-1] if found else None


def worst_status(statuses):
    """The run's status from its launchers' (one per node): the worst of them."""
    order = ("ok", "failed", "timeout", "harness_error", "interrupted")
    return max(statuses, key=order.index, default=None)


def _launch_status(launcher_events):
    return worst_status(e["status"] for e in launcher_events if e["event"] == "launch_end")


def saves(events) -> list:
    """Every completed save of the run, oldest first."""
    return [e for e in events if e["event"] == "save_end"]


def is_corrupt_read(error_type: str, message: str) -> bool:
    # torch 2.14's torch.load of the first half of a checkpoint raises OSError EINVAL
    half_file = error_type == "OSError" and "Invalid argument" in message
    return half_file or error_type in _CORRUPT_TYPES or any(s in message for s in _CORRUPT_TEXT)


def classify_load_error(error_type: str, message: str, in_reader: bool = False) -> str:
    """in_reader: raised while the file's bytes were decoded (train/frameworks/common.py's error_fields)."""
    if error_type == "FileNotFoundError":
        return "missing"
    if error_type == "IsADirectoryError":  # a folder where the file should be: nothing readable
        return "corrupt"
    if _UNSAFE_TEXT in message:  # weights_only refused it: a global (code), or bytes that are no pickle at all
        return "corrupt" if "Unsupported operand" in message else "unsafe"
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


def _never_came(events, how, rank) -> list:
    """The ranks that never entered this kind of sync, which `rank` waited for."""
    entered = {e["rank"] for e in events if e["event"] == "sync_enter" and e.get("how") == how}
    ranks = {e["rank"] for e in events if e["event"] == "rank_start"}
    return sorted(ranks - entered - {rank})


def _timeout_detail(events, sync_error, rank) -> str:
    how = sync_error.get("how", "sync")
    if how == "file":
        failed = _last(events, "save_error")
        why = f" (rank 0's save failed: {failed['error_type']})" if failed else ""
        return f"no checkpoint appeared within its wait{why}"
    missing = _never_came(events, how, rank)
    return f"{how}: waited for {_ranks(missing)}, which never came" if missing else f"{how}: timed out"


def _place(peer: int, place: dict, events) -> str:
    """Where a peer was when a rank's sync could never end, in words (place: train/hang.py's)."""
    if place["at"] == "sync":
        return f"rank {peer} waited in its {place['how']} instead"
    skipped = "skipped the load and " if any(e["rank"] == peer and e["event"] == "skip" for e in events) else ""
    if place["at"] == "end":
        return f"rank {peer} {skipped}went on to the end of the run without entering it"
    return f"rank {peer} {skipped}had left the run without entering it"  # done


def hang_detail(hang: dict, events) -> str:
    """What a hang event says: which sync could never end, and where each peer it waited for was."""
    peers = [_place(int(r), hang["peers"][str(r)], events) for r in hang["waiting_for"]]
    return f"its {hang['sync']} could never end: " + "; ".join(peers)


def classify_rank(rank: int, events: list) -> RankOutcome:
    """events: the whole run's events (all ranks and the launcher)."""
    mine = [e for e in events if e["rank"] == rank]
    launcher = [e for e in events if e["rank"] == "launcher"]
    written = saves(events)
    last_written = written[-1] if written else None
    final = _last(mine, "final")

    def result(outcome, detail="", log=""):
        return RankOutcome(rank, outcome, detail, rank_timings(mine, events), final["digest"] if final else "", log)

    done = _last(mine, "load_done")
    if done:
        if last_written and done["digest"] == last_written["digest"]:
            return result("loaded")
        older = [s for s in written if s["digest"] == done["digest"]]
        return result("stale", f"loaded {'the epoch-%d save' % older[-1]['epoch'] if older else 'a file this run never wrote'}")

    failed = _last(mine, "load_error")
    if failed:
        outcome = classify_load_error(failed["error_type"], failed["message"], failed.get("in_reader", False))
        seen = (_last(mine, "load_attempt") or {}).get("bytes")
        if outcome == "error" and last_written and seen is not None and seen < last_written.get("bytes", 0):
            outcome = "corrupt"  # it read a file shorter than the finished checkpoint
        return result(outcome, load_error_sentence(failed["error_type"], failed["message"]))

    hung = _last(mine, "hang")
    if hung:  # before its own exit code: the rank was ended on purpose, the moment the hang was certain
        return result("hung", hang_detail(hung, events))

    failures = [e for e in launcher if e["event"] == "rank_failed"]
    sync = _last(mine, "sync_error")
    if sync:
        if sync.get("timed_out"):
            return result("timeout", _timeout_detail(events, sync, rank))
        peers = sorted({e["failed_rank"] for e in failures} - {rank})
        if peers:  # its sync broke because a peer died: the peer's failure, not its own
            return result("aborted", f"its {sync.get('how', 'sync')} broke when {_ranks(peers)} died")
        if _launch_status(launcher) == "interrupted":
            return result("aborted", f"its {sync.get('how', 'sync')} broke when the run was interrupted")
        gave_up = sorted({e["rank"] for e in events if e["event"] == "sync_error" and e.get("timed_out")
                          and e["t"] <= sync["t"]} - {rank})
        if gave_up:  # it came late, after its peers had stopped waiting
            return result("aborted", f"its {sync.get('how', 'sync')} broke: {_ranks(gave_up)} had stopped waiting")
        return result("error", f"{sync.get('how', 'sync')}: {sync['error_type']}: {short(sync['message'])}")

    skipped = _last(mine, "skip")
    if skipped:
        return result("skipped", skipped["reason"])
    if _last(mine, "crash"):
        return result("crashed", "it died where the scenario placed a crash (fault.crash_rank)")
    died = [e for e in failures if e["failed_rank"] == rank]
    if died:
        return result("error", died[-1].get("message") or f"exit code {died[-1]['exitcode']}",
                      died[-1].get("log", ""))
    status = _launch_status(launcher)
    if status == "timeout":
        return result("timeout", "stopped by the launcher at timeout.run_s")
    if not _last(mine, "rank_end") and status in ("failed", "interrupted", "harness_error", None):
        why = {"failed": "after a peer failed", "interrupted": "on interrupt"}.get(status, "")
        return result("aborted", f"stopped by the launcher {why}".strip())
    return result("error", "ended without loading")


TIMED = ("fit_start", "train_end", "save_start", "save_end", "save_error", "sync_enter", "sync_exit", "sync_error",
         "hang", "skip", "load_attempt", "load_done", "load_error", "final", "rank_end")


def rank_timings(mine: list, events: list) -> dict:
    """Seconds since launch_start for this rank's milestones, and how its load stood against the last save."""
    starts = [e["t"] for e in events if e["event"] == "launch_start"]
    t0 = min(starts) if starts else min(e["t"] for e in events)
    out = {}
    for name in TIMED:
        e = _last(mine, name)
        if e:
            out[name] = round(e["t"] - t0, 3)
    enter = _last(mine, "sync_enter")
    left = min((e for e in mine if e["event"] in ("hang", "sync_exit", "sync_error") and enter and e["t"] >= enter["t"]),
               key=lambda e: e["t"], default=None)  # the end of its last sync: the first hang, exit or error after it
    if enter and left:
        out["wait"] = round(left["t"] - enter["t"], 3)  # how long its sync held it
    written = saves(events)
    attempt = _last(mine, "load_attempt")
    if written and attempt:
        # negative: this rank started reading before the last save had ended
        out["load_after_save_end"] = round(attempt["t"] - written[-1]["t"], 3)
    return out


def short(message: str) -> str:
    """The gist of an error message: no source-location prefix, first sentence only."""
    message = re.sub(r"^\[[^\]]*[/:][^\]]*\]\s*", "", message)  # e.g. "[../gloo/pair.cc:534] "
    return message.split(". ")[0][:120]


def _ranks(ranks):
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _secs(x):
    return f"{x:.1f}" if abs(x) >= 0.95 else f"{x:.2f}"


def _span(values):
    lo, hi = _secs(min(values)), _secs(max(values))
    return f"{lo} s" if lo == hi else f"{lo}-{hi} s"


def replicas(outcomes: list) -> str:
    digests = [o.final_digest for o in outcomes]
    if not all(digests):
        return "unknown"
    return "agree" if len(set(digests)) == 1 else "diverged"


def _diverged_part(outcomes) -> str:
    by_digest = {}
    for o in outcomes:
        by_digest.setdefault(o.final_digest, []).append(o.rank)
    groups = sorted(by_digest.values())
    return "the replicas diverged: " + " vs ".join(_ranks(g) for g in groups) + " end with different weights"


def explain(outcomes: list, events: list, verdict: str, agreement: str) -> str:
    """One sentence on what happened, worst news first."""
    by = {}
    for o in outcomes:
        by.setdefault(o.outcome, []).append(o)
    written = saves(events)
    saver = f"rank {written[-1]['rank']}" if written else "the saving rank"
    save_error = _last(events, "save_error")

    if verdict == "interrupted":
        sig = next((e for e in events if e["event"] == "signal"), None)  # the first: what stopped the run
        return f"interrupted: the run was stopped{' by ' + sig['name'] if sig else ''} before it ended; no verdict"
    if verdict == "error":
        launch_error = _last(events, "launch_error")
        if launch_error:
            return f"error: the launch failed ({launch_error['error_type']}: {launch_error['message']})"
        failed = by.get("error", [])
        where = lambda o: f"; traceback in {o.log}" if o.log else ""  # noqa: E731
        return "error: " + "; ".join(f"rank {o.rank} failed ({o.detail}{where(o)})" for o in failed)
    if verdict == "save_failed":
        return (f"save_failed: rank 0's save failed ({save_error['error_type']}: {short(save_error['message'])}); "
                "every rank agreed not to load and all hold the same weights")

    def early(group):
        leads = [-o.timings["load_after_save_end"] for o in group if "load_after_save_end" in o.timings]
        return leads if leads and min(leads) > 0 else None

    parts = []
    if save_error:
        parts.append(f"rank 0's save failed ({save_error['error_type']}: {short(save_error['message'])})")
    for name in ("missing", "corrupt", "unsafe", "stale"):
        group = by.get(name, [])
        if not group:
            continue
        leads = early(group)
        what = {"missing": "tried to load", "corrupt": "read a partly written checkpoint",
                "unsafe": "refused a checkpoint that holds code (weights_only=True)",
                "stale": "loaded an older checkpoint"}[name]
        if name == "stale":
            what += f" ({group[0].detail.removeprefix('loaded ')})"
        not_here = _not_on_this_node(events, group, written[-1]) if name == "missing" and written else ""
        when = f" {_span(leads)} before {saver} finished saving" if leads and name != "unsafe" and not not_here else \
            (" and no save finished" if not written and name == "missing" else "")  # not on its disk: never
        why = f" ({group[0].detail.split(':')[0]})" if name in ("missing", "corrupt") and group[0].detail else ""
        if name == "missing" and ONLY_WARNED in group[0].detail:  # no error raised: say what the framework did
            why = f" ({group[0].detail.split(' (')[0]})"
        why += not_here
        parts.append(f"{_ranks(o.rank for o in group)} {what}{when}{why}")
    if by.get("skipped"):
        parts.append(f"{_ranks(o.rank for o in by['skipped'])} skipped the load ({by['skipped'][0].detail})")
    if by.get("timeout"):
        waits = [o.timings["wait"] for o in by["timeout"] if "wait" in o.timings]
        after = f" after {_span(waits)}" if waits else ""
        parts.append(f"{_ranks(o.rank for o in by['timeout'])} timed out{after} ({by['timeout'][0].detail})")
    for o in by.get("hung", []):
        parts.append(f"rank {o.rank} hung ({o.detail}; ended at once, not at timeout.collective_s)")
    if by.get("crashed"):
        parts.append(f"{_ranks(o.rank for o in by['crashed'])} crashed on purpose")
    if by.get("aborted"):
        end = _last(events, "launch_end")
        why = "by an interrupt" if end and end["status"] == "interrupted" else "after a peer failed"
        parts.append(f"{_ranks(o.rank for o in by['aborted'])} stopped {why}")
    if agreement == "diverged":
        parts.append(_diverged_part(outcomes))
    if verdict == "race":
        return "race: " + "; ".join(parts)

    others = [o for o in outcomes if not written or o.rank != written[-1]["rank"]]
    after = [o.timings["load_after_save_end"] for o in others if "load_after_save_end" in o.timings]
    tail = f"; {_ranks(o.rank for o in others)} started loading {_span(after)} after the save ended" \
        if others and after and min(after) >= 0 else ""
    traps = _traps(events, written)
    avoided = f". The trap it avoided: {'; '.join(traps)}" if traps else ""
    return f"clean: every rank loaded the last checkpoint {saver} wrote{tail}{avoided}"


def _node(events, rank):
    start = next((e for e in events if e["rank"] == rank and e["event"] == "rank_start"), None)
    return start.get("node", 0) if start else 0


def _not_on_this_node(events, group, last_save) -> str:
    """Why ranks that read after the save ended found no file: the file is on another node's own disk."""
    saved_on = _node(events, last_save["rank"])
    elsewhere = sorted({_node(events, o.rank) for o in group} - {saved_on})
    local = any(e["event"] == "fit_start" and e.get("node_local") for e in events)
    if not (elsewhere and local):
        return ""
    nodes = ", ".join(f"node {n}" for n in elsewhere)
    return f": the file is on node {saved_on}'s own disk; {nodes}'s disk has none"


def _traps(events, written) -> list:
    """What in this run would have made a rank read the wrong thing, from the faults' own events."""
    traps = []
    for e in events:
        if e["event"] == "skew_start" and e.get("at") == "mid_write":
            traps.append(f"rank {e['rank']} stalled {_secs(e['seconds'])} s halfway through writing the checkpoint, "
                         "so it existed half-written")
        elif e["event"] == "skew_start":
            traps.append(f"rank {e['rank']} was {_secs(e['seconds'])} s late at its last save")
    older = [w for w in written if w.get("epoch", 0) < written[-1].get("epoch", 0)]
    if older:
        traps.append(f"an older checkpoint (epoch {older[-1]['epoch']}) was there to read before the last one")
    if any(e["event"] == "rank_misdetected" for e in events):
        traps.append("every process believed it was rank 0 at the last save")
    nodes = {_node(events, r) for r in {e["rank"] for e in events if e["event"] == "rank_start"}}
    if len(nodes) > 1 and any(e["event"] == "fit_start" and e.get("node_local") for e in events):
        traps.append("each node has its own disk, so a file written on one is not on the others")
    waits = [e for e in events if e["event"] == "sync_exit"]
    if traps and waits:
        longest = max(waits, key=lambda e: _wait_of(events, e))
        how = SYNC_WAITS.get(longest["how"], f"in its {longest['how']}")
        traps.append(f"rank {longest['rank']} waited {_secs(_wait_of(events, longest))} s {how}")
    return traps


SYNC_WAITS = {"barrier": "at the barrier", "file": "for the file", "agree": "for rank 0's decision",
              "broadcast": "for rank 0's broadcast of the weights"}


def _wait_of(events, sync_exit) -> float:
    entered = [e["t"] for e in events if e["rank"] == sync_exit["rank"] and e["event"] == "sync_enter"
               and e["t"] <= sync_exit["t"]]
    return sync_exit["t"] - max(entered) if entered else 0.0


def decide(outcomes: list, events: list, status) -> str:
    kinds = {o.outcome for o in outcomes}
    if status == "interrupted":
        return "interrupted"
    if status == "harness_error" or "error" in kinds:
        return "error"
    if kinds == {"loaded"}:
        return "clean"
    if _last(events, "save_error") and kinds == {"skipped"} and replicas(outcomes) == "agree":
        return "save_failed"
    return "race"


def judge(events: list, world_size: int) -> Verdict:
    """The run's verdict over every rank's outcome (see the module's docstring)."""
    if any(e["event"] == "loop_start" for e in events):
        return resume_judge(events, world_size)
    outcomes = [classify_rank(r, events) for r in range(world_size)]
    verdict = decide(outcomes, events, _launch_status([e for e in events if e["rank"] == "launcher"]))
    agreement = replicas(outcomes)
    return Verdict(verdict, explain(outcomes, events, verdict, agreement), agreement, outcomes)


# --- the resume loop (framework=torch_loop): restarts, and the checkpoint each attempt resumed from ------------

FAILURE_EVENTS = ("crash", "load_error", "rotate_error", "train_error", "sync_error")


def _attempt(e) -> int:
    return e.get("attempt", 0)


def newest_complete(events, t: float):
    """The newest save that had ended by time t (its save_end), or None."""
    ended = [e for e in saves(events) if e["t"] <= t]
    return max(ended, key=lambda e: e.get("step", 0), default=None)


def resume_record(events, resume: dict) -> dict:
    """One resume against the newest complete checkpoint at that moment: steps_lost > 0 were redone (it resumed
    older), < 0 skipped (it resumed from a step no complete save had reached)."""
    newest = newest_complete(events, resume["t"])
    newest_step = newest["step"] if newest else 0
    out = {"attempt": _attempt(resume), "step": resume["step"], "path": resume.get("path"),
           "newest_complete": newest["path"] if newest else None, "newest_step": newest_step,
           "steps_lost": newest_step - resume["step"]}
    same_step = [s for s in saves(events) if s["t"] <= resume["t"] and s.get("step") == resume["step"]]
    out["torn"] = bool(resume.get("path")) and bool(same_step) and all(s["digest"] != resume["digest"]
                                                                       for s in same_step)
    return out


def attempt_end(events, n: int, finished: bool) -> dict:
    """How attempt n ended: finished, or the first failure in it (which rank, which file, what)."""
    if finished:
        return {"attempt": n, "ended": "finished"}
    mine = [e for e in events if isinstance(e["rank"], int) and _attempt(e) == n]
    failed = [e for e in mine if e["event"] in FAILURE_EVENTS]
    if not failed:
        return {"attempt": n, "ended": "died", "rank": None, "file": None, "what": "no rank recorded why"}
    first = min(failed, key=lambda e: e["t"])
    if first["event"] == "crash":
        what = f"rank {first['rank']} killed with SIGKILL {first['at'].replace('_', ' ')} (planted)"
    elif first["event"] == "load_error":
        kind = classify_load_error(first["error_type"], first["message"], first.get("in_reader", False))
        what = f"rank {first['rank']} could not resume from it ({kind}: {load_error_sentence(first['error_type'], first['message'])})"
    elif first["event"] == "rotate_error":
        what = f"rank {first['rank']} deleting it: {first['error_type']}: {short(first['message'])}"
    else:
        where = f"epoch {first['epoch']}" if "epoch" in first else f"its {first['how']}" if "how" in first \
            else "training"
        what = f"rank {first['rank']} in {where}: {first['error_type']}: {short(first['message'])}"
    return {"attempt": n, "ended": "died", "rank": first["rank"], "file": first.get("path"), "what": what,
            "error_type": first.get("error_type")}


def resume_rank(rank: int, events: list, last: int, status, resumes: list) -> RankOutcome:
    """One rank of a resume run: how its last attempt ended, else how its resumes stood."""
    mine = [e for e in events if e["rank"] == rank]
    now = [e for e in mine if _attempt(e) == last]
    final = _last(now, "final")

    def result(outcome, detail=""):
        return RankOutcome(rank, outcome, detail, rank_timings(now, events), final["digest"] if final else "")

    failed = _last(now, "load_error")
    if failed:
        kind = classify_load_error(failed["error_type"], failed["message"], failed.get("in_reader", False))
        return result(kind, f"resuming from {failed.get('path')}: {load_error_sentence(failed['error_type'], failed['message'])}")
    deleted = _last(now, "rotate_error")
    if deleted:
        kind = "missing" if deleted["error_type"] == "FileNotFoundError" else "error"
        return result(kind, f"deleting {deleted['path']}: {deleted['error_type']}: {short(deleted['message'])}")
    if _last(now, "crash"):
        return result("crashed", "killed with SIGKILL where the scenario placed it")
    worst = max(resumes, key=lambda r: (r["torn"], abs(r["steps_lost"]), r["attempt"]), default=None)
    behind = ""
    if worst and worst["steps_lost"] > 0:
        behind = (f"resumed from step {worst['step']} in attempt {worst['attempt']}; the newest complete checkpoint "
                  f"was step {worst['newest_step']}: {worst['steps_lost']} steps redone")
    trained = _last(now, "train_error") or _last(now, "sync_error")
    if trained:
        if trained.get("timed_out"):
            return result("timeout", "; ".join(x for x in (behind, f"then its {trained.get('how', 'all-reduce')} "
                                                          "timed out waiting for a peer") if x))
        return result("aborted", f"{trained['error_type']} when a peer died")
    if final and status == "ok":
        if worst and worst["torn"]:
            return result("corrupt", f"resumed from {worst['path']}, weights no complete save wrote")
        if worst and worst["steps_lost"] < 0:
            return result("corrupt", f"resumed from step {worst['step']}, ahead of every complete save "
                                     f"(step {worst['newest_step']}): {-worst['steps_lost']} steps skipped")
        if behind:
            return result("stale", behind)
        return result("loaded", f"resumed from step {worst['step']}" if worst and worst["path"] else "")
    return result("aborted", "stopped by torch elastic when a peer failed")


def resume_judge(events: list, world_size: int) -> Verdict:
    """The verdict of a resume loop's run: clean only when it finished, every rank resumed from the newest
    complete checkpoint each time, and the replicas agree. A run that used up its restarts is never clean."""
    status = _launch_status([e for e in events if e["rank"] == "launcher"])
    ranked = [e for e in events if isinstance(e["rank"], int)]
    attempts = sorted({_attempt(e) for e in ranked}) or [0]
    last = attempts[-1]
    resumes = {r: [resume_record(events, e) for e in ranked if e["rank"] == r and e["event"] == "resume"]
               for r in range(world_size)}
    outcomes = [resume_rank(r, events, last, status, resumes[r]) for r in range(world_size)]
    # the replicas: the weights each rank resumed from, attempt by attempt, then what each ends with
    split = []
    for n in attempts:
        read = {e["rank"]: e for e in ranked if e["event"] == "resume" and _attempt(e) == n}
        if len({e["digest"] for e in read.values()}) > 1:
            split.append({r: e["step"] for r, e in sorted(read.items())})
    agreement = "diverged" if split else replicas(outcomes)
    ends = [attempt_end(events, n, finished=n == last and status == "ok") for n in attempts]
    run = "interrupted" if status == "interrupted" else "error" if status == "harness_error" else \
        ("diverged" if agreement == "diverged" else "finished") if status == "ok" else "out_of_restarts"
    record = {"run": run, "restarts": len(attempts) - 1, "attempts": ends,
              "ranks": {str(r): resumes[r] for r in range(world_size)}, "diverged_at_resume": split}
    kinds = {o.outcome for o in outcomes}
    if status in ("interrupted", "harness_error") or "error" in kinds:
        verdict = "interrupted" if status == "interrupted" else "error"
    elif run == "finished" and kinds == {"loaded"} and agreement == "agree":
        verdict = "clean"
    else:
        verdict = "race"
    return Verdict(verdict, resume_explain(verdict, record, outcomes), agreement, outcomes, record)


def resume_explain(verdict: str, record: dict, outcomes: list) -> str:
    """One sentence: how each attempt ended, where each rank resumed from, and how the run ended."""
    died = [a for a in record["attempts"] if a["ended"] == "died"]
    deaths = "; ".join(f"attempt {a['attempt']} died on {file_name(a['file'])}: {a['what']}" for a in died)
    if verdict in ("error", "interrupted"):
        bad = [o for o in outcomes if o.outcome == "error"]
        ended = {"error": "the launch failed before a rank said why", "interrupted": "stopped before it ended"}
        return f"{verdict}: " + ("; ".join(f"rank {o.rank} failed ({o.detail})" for o in bad)
                                 or ended[record["run"]])  # no rank's error: the launch failed, or a stop
    parts = []
    if record["run"] == "out_of_restarts":
        n = len(record["attempts"])
        parts.append(f"ran out of restarts after {n} attempt{'s' if n > 1 else ''} ({deaths})")
    elif died:
        parts.append(f"torch elastic restarted it {record['restarts']} time{'s' if record['restarts'] > 1 else ''} "
                     f"({deaths})")
    for split in record["diverged_at_resume"]:
        steps = ", ".join(f"rank {r} from step {s}" for r, s in split.items())
        parts.append(f"the replicas diverged from the first step: the ranks resumed from different checkpoints "
                     f"({steps})")
    bad = [o for o in outcomes if o.outcome != "loaded"]
    parts += [f"rank {o.rank} {o.outcome} ({o.detail})" for o in bad if o.detail]
    if verdict == "race":
        return "race: " + "; ".join(parts)
    last = [r[-1] for r in record["ranks"].values() if r]
    steps = sorted({r["step"] for r in last})
    where = f"every rank resumed from step {steps[0]}, the newest complete checkpoint, " if len(steps) == 1 and \
        any(r["path"] for r in last) else ""
    return "clean: " + "; ".join(parts + [f"{where}finished with agreeing replicas"])


def file_name(path) -> str:
    return str(path).rsplit("/", 1)[-1] if path else "no file"
