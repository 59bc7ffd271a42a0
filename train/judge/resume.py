"""The resume verdict (workload=resume): each rank's resumes against the newest complete checkpoint, and how the run ended."""
import re
from typing import Any, Optional

from train.judge.crash_loop import crash_loop
from train.judge.explain import replicas
from train.judge.load_best import hang_detail, rank_timings
from train.judge.own_reads import own_raise
from train.judge.shards import mixed_resumes, never_written
from train.judge.vocabulary import (
    FAILURE_EVENTS,
    Event,
    RankOutcome,
    Verdict,
    classify_load_error,
    file_name,
    last_event,
    launch_status,
    load_error_sentence,
    saves,
    short,
)

# --- the resume (workload=resume): restarts, and the checkpoint each attempt resumed from ------------



def _attempt(e: Event) -> int:
    return int(e.get("attempt", 0))


def newest_complete(events: list[Event], t: float) -> Optional[Event]:
    """The newest save that had ended by time t (its save_end), or None."""
    ended = [e for e in saves(events) if e["t"] <= t]
    return max(ended, key=lambda e: e.get("step", 0), default=None)


def resume_record(events: list[Event], resume: Event) -> dict[str, Any]:
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


def attempt_end(events: list[Event], n: int, finished: bool) -> dict[str, Any]:
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
        raised = own_raise([e for e in mine if e["rank"] == first["rank"]])
        if kind == "error" and raised:
            what = f"rank {first['rank']} could not resume from it: {raised[1]}"
        else:
            what = f"rank {first['rank']} could not resume from it ({kind}: {load_error_sentence(first['error_type'], first['message'])})"
    elif first["event"] == "hang":
        what = f"rank {first['rank']} hung: its {first['sync']} could never end"
    elif first["event"] == "rotate_error":
        what = f"rank {first['rank']} deleting it: {first['error_type']}: {short(first['message'])}"
    else:
        where = f"epoch {first['epoch']}" if "epoch" in first else f"its {first['how']}" if "how" in first \
            else "training"
        what = f"rank {first['rank']} in {where}: {first['error_type']}: {short(first['message'])}"
    return {"attempt": n, "ended": "died", "rank": first["rank"], "file": first.get("path") or touched(mine, first),
            "what": what, "error_type": first.get("error_type")}


def touched(mine: list[Event], failure: Event) -> Optional[str]:
    """The last checkpoint path your code opened or listed on the failed rank before its failure (file_op with
    `by`, train/rank/observe.py), or None."""
    ops = [e for e in mine if e["event"] == "file_op" and e.get("by") and e["rank"] == failure["rank"]
           and e["t"] <= failure["t"]]
    return ops[-1]["path"] if ops else None


def uncommitted(events: list[Event], n: int) -> str:
    """Why attempt n's final checkpoint is missing, or "": a save it dispatched (save_dispatch with commits: the
    saver records save_commit once its commit point, dcp's .metadata, is written) that never committed in it."""
    committed = {e.get("step") for e in events if e["event"] == "save_commit" and _attempt(e) == n}
    lost = [e for e in events if e["event"] == "save_dispatch" and e.get("commits") and _attempt(e) == n
            and e.get("step") not in committed]
    if not lost:
        return ""
    last = max(lost, key=lambda e: e["step"])  # every save_dispatch names its step
    return (f"the run ended with the save of step {last['step']} ({file_name(last.get('path'))}) dispatched and never "
            f"committed (no .metadata): its final checkpoint is missing")


def resume_rank(rank: int, events: list[Event], last: int, status: Optional[str], resumes: list[dict[str, Any]],
                mixed: str = "", lost: str = "", foreign: str = "") -> RankOutcome:
    """One rank of a resume run: how its last attempt ended, else how its resumes stood (mixed: why a resume of
    it mixed steps, train/judge/shards.py; lost: why the run's final checkpoint is missing, uncommitted; foreign:
    why a resume of it read a checkpoint this run never wrote, shards.never_written)."""
    mine = [e for e in events if e["rank"] == rank]
    now = [e for e in mine if _attempt(e) == last]
    final = last_event(now, "final")

    def result(outcome: str, detail: str = "") -> RankOutcome:
        return RankOutcome(rank, outcome, detail, rank_timings(now, events), final["digest"] if final else "")

    failed = last_event(now, "load_error")
    if failed:
        kind = classify_load_error(failed["error_type"], failed["message"], failed.get("in_reader", False))
        raised = own_raise(now)  # it passed through your code: your resume's failure, never the harness's
        if kind == "error" and raised:
            return result(*raised)
        return result(kind, f"resuming from {failed.get('path') or 'the folder'}: "
                            f"{load_error_sentence(failed['error_type'], failed['message'])}")
    deleted = last_event(now, "rotate_error")
    if deleted:
        kind = "missing" if deleted["error_type"] == "FileNotFoundError" else "error"
        return result(kind, f"deleting {deleted['path']}: {deleted['error_type']}: {short(deleted['message'])}")
    if last_event(now, "crash"):
        return result("crashed", "killed with SIGKILL where the scenario placed it")
    hung = last_event(now, "hang")
    if hung:  # ended on purpose the moment its wait could never end (train/toolkit/hang.py)
        return result("hung", hang_detail(hung, events))
    worst = max(resumes, key=lambda r: (r["torn"], abs(r["steps_lost"]), r["attempt"]), default=None)
    behind = ""
    if worst and worst["steps_lost"] > 0:
        behind = (f"resumed from step {worst['step']} in attempt {worst['attempt']}; the newest complete checkpoint "
                  f"was step {worst['newest_step']}: {worst['steps_lost']} steps redone")
    trained = last_event(now, "train_error") or last_event(now, "sync_error")
    if trained:
        if trained.get("timed_out"):
            return result("timeout", "; ".join(x for x in (behind, f"then its {trained.get('how', 'all-reduce')} "
                                                          "timed out waiting for a peer") if x))
        return result("aborted", f"{trained['error_type']} when a peer died")
    if final and status == "ok":
        if mixed:  # every load returned, and the state it trained on mixed steps
            return result("mixed", mixed)
        if foreign:  # every load returned, from another run's checkpoint
            return result("stale", foreign)
        if lost:  # it finished, and the last save it dispatched never landed: a resume would find it incomplete
            return result("missing", lost)
        if worst and worst["torn"]:
            return result("corrupt", f"resumed from {worst['path']}, weights no complete save wrote")
        if worst and worst["steps_lost"] < 0:
            return result("corrupt", f"resumed from step {worst['step']}, ahead of every complete save "
                                     f"(step {worst['newest_step']}): {-worst['steps_lost']} steps skipped")
        if behind:
            return result("stale", behind)
        return result("loaded", f"resumed from step {worst['step']}" if worst and worst["path"] else "")
    if status == "timeout":
        return result("timeout", "stopped by the launcher at timeout.run_s")
    return result("aborted", "stopped by torch elastic when a peer failed")


def resume_judge(events: list[Event], world_size: int) -> Verdict:
    """The verdict of a resume loop's run: clean only when it finished, every rank resumed from the newest
    complete checkpoint each time, and the replicas agree. A run that used up its restarts is never clean."""
    status = launch_status([e for e in events if e["rank"] == "launcher"])
    ranked = [e for e in events if isinstance(e["rank"], int)]
    attempts = sorted({_attempt(e) for e in ranked}) or [0]
    named = last_event([e for e in events if e["rank"] == "launcher"], "crash_loop")
    if status == "crash_loop" and named:  # an attempt the agent began as the launcher stopped it is no evidence
        attempts = [n for n in attempts if n <= named["attempts"][-1]]
        ranked = [e for e in ranked if _attempt(e) <= named["attempts"][-1]]
    last = attempts[-1]
    resumes = {r: [resume_record(events, e) for e in ranked if e["rank"] == r and e["event"] == "resume"]
               for r in range(world_size)}
    mixed, foreign = mixed_resumes(events, world_size), never_written(ranked)
    lost = uncommitted(ranked, last) if status == "ok" else ""
    outcomes = [resume_rank(r, events, last, status, resumes[r], mixed.get(r, ""), lost, foreign.get(r, ""))
                for r in range(world_size)]
    # the replicas: the weights each rank resumed from, attempt by attempt, then what each ends with
    split = []
    for n in attempts:
        read = {e["rank"]: e for e in ranked if e["event"] == "resume" and _attempt(e) == n}
        if len({e["digest"] for e in read.values()}) > 1:
            split.append({r: e["step"] for r, e in sorted(read.items())})
    agreement = "diverged" if split else replicas(outcomes)
    ends = [attempt_end(events, n, finished=n == last and status == "ok") for n in attempts]
    if status == "timeout" and ends[-1]["ended"] == "died" and ends[-1]["rank"] is None:  # the limit ended it
        ends[-1] = {"attempt": last, "ended": "stopped", "what": "stopped by the launcher at timeout.run_s"}
    stopped = {"interrupted": "interrupted", "harness_error": "error", "crash_loop": "crash_loop",
               "timeout": "timed_out"}
    run = stopped.get(status or "") or (("diverged" if agreement == "diverged" else "finished") if status == "ok"
                                  else "out_of_restarts")
    record = {"run": run, "restarts": len(attempts) - 1, "attempts": ends,
              "ranks": {str(r): resumes[r] for r in range(world_size)}, "diverged_at_resume": split}
    if run == "crash_loop":  # the launcher ended it the moment the loop was certain (train/judge/crash_loop.py)
        record["crash_loop"] = {k: v for k, v in named.items() if k not in ("t", "rank", "event")} if named \
            else crash_loop(events)
    if mixed:  # sharded state whose resume mixed steps (train/judge/shards.py)
        record["mixed"] = {str(r): why for r, why in sorted(mixed.items())}
    if foreign:  # a checkpoint this run never wrote (train/judge/shards.py)
        record["never_written"] = {str(r): why for r, why in sorted(foreign.items())}
    kinds = {o.outcome for o in outcomes}
    if status in ("interrupted", "harness_error") or "error" in kinds:
        verdict = "interrupted" if status == "interrupted" else "error"
    elif run == "finished" and kinds == {"loaded"} and agreement == "agree":
        verdict = "clean"
    else:
        verdict = "race"
    return Verdict(verdict, resume_explain(verdict, record, outcomes), agreement, outcomes, record)


def death_runs(died: list[dict[str, Any]]) -> list[str]:
    """'attempt N died on F: what' for each death, attempts in a row that died the same way (whichever rank)
    said once: 'attempts 1-329 died on epoch1.pt: a rank could not resume from it (...)'."""
    runs: list[list[Any]] = []  # [first, last, file, what with 'a rank', the whats]
    for a in died:
        same = re.sub(r"^rank \d+ ", "a rank ", a["what"])
        if runs and runs[-1][2] == a["file"] and runs[-1][3] == same and runs[-1][1] == a["attempt"] - 1:
            runs[-1][1] = a["attempt"]
            runs[-1][4].add(a["what"])
        else:
            runs.append([a["attempt"], a["attempt"], a["file"], same, {a["what"]}])
    return [f"attempt {first} died on {file_name(file)}: {next(iter(whats))}" if first == last else
            f"attempts {first}-{last} died on {file_name(file)}: {next(iter(whats)) if len(whats) == 1 else same}"
            for first, last, file, same, whats in runs]


def resume_explain(verdict: str, record: dict[str, Any], outcomes: list[RankOutcome]) -> str:
    """One sentence: how each attempt ended, where each rank resumed from, and how the run ended."""
    died = [a for a in record["attempts"] if a["ended"] == "died"]
    deaths = "; ".join(death_runs(died))
    if verdict in ("error", "interrupted"):
        bad = [o for o in outcomes if o.outcome == "error"]
        ended = {"error": "the launch failed before a rank said why", "interrupted": "stopped before it ended"}
        return f"{verdict}: " + ("; ".join(f"rank {o.rank} failed ({o.detail})" for o in bad)
                                 or ended[record["run"]])  # no rank's error: the launch failed, or a stop
    parts = []
    n = len(record["attempts"])
    attempts = f"{n} attempt{'s' if n > 1 else ''}"
    if record["run"] == "crash_loop" and record.get("crash_loop"):
        parts.append(f"{record['crash_loop']['sentence']}; ended after {attempts}, the restarts left unused "
                     f"({deaths})")
    elif record["run"] == "timed_out":
        parts.append(f"stopped by the launcher at timeout.run_s after {attempts} ({deaths or 'none died'})")
    elif record["run"] in ("out_of_restarts", "crash_loop"):
        parts.append(f"ran out of restarts after {attempts} ({deaths})")
    elif died:
        parts.append(f"torch elastic restarted it {record['restarts']} time{'s' if record['restarts'] > 1 else ''} "
                     f"({deaths})")
    for split in record["diverged_at_resume"]:
        froms = ", ".join(f"rank {r} from step {s}" for r, s in split.items())
        parts.append(f"the replicas diverged from the first step: the ranks resumed from different checkpoints "
                     f"({froms})")
    bad = [o for o in outcomes if o.outcome != "loaded"]
    parts += [f"rank {o.rank} {o.outcome} ({o.detail})" for o in bad if o.detail]
    if verdict == "race":
        return "race: " + "; ".join(parts)
    last = [r[-1] for r in record["ranks"].values() if r]
    steps = sorted({r["step"] for r in last})
    where = f"every rank resumed from step {steps[0]}, the newest complete checkpoint, " if len(steps) == 1 and \
        any(r["path"] for r in last) else ""
    return "clean: " + "; ".join(parts + [f"{where}finished with agreeing replicas"])
