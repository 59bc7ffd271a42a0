"""The load-best verdict: what each rank saw at the load at the end, and the run's verdict (pure functions over event records)."""
from typing import Any, Optional

from train.judge.explain import explain, replicas
from train.judge.own_reads import short_path, yours
from train.judge.vocabulary import (
    Event,
    RankOutcome,
    Verdict,
    classify_load_error,
    last_event,
    launch_status,
    load_error_sentence,
    ranks_text,
    saves,
    says_save_failed,
    secs,
    short,
)


def _never_came(events: list[Event], how: str, rank: int) -> list[int]:
    """The ranks that never entered this kind of sync, which `rank` waited for."""
    entered = {e["rank"] for e in events if e["event"] == "sync_enter" and e.get("how") == how}
    ranks = {e["rank"] for e in events if e["event"] == "rank_start"}
    return sorted(ranks - entered - {rank})


def _timeout_detail(events: list[Event], sync_error: Event, rank: int) -> str:
    how = sync_error.get("how", "sync")
    if how == "file":
        failed = last_event(events, "save_error")
        why = f" (rank 0's save failed: {failed['error_type']})" if failed else ""
        return f"no checkpoint appeared within its wait{why}"
    missing = _never_came(events, how, rank)
    return f"{how}: waited for {ranks_text(missing)}, which never came" if missing else f"{how}: timed out"


def _place(peer: int, place: dict[str, Any], events: list[Event]) -> str:
    """Where a peer was when a rank's sync could never end, in words (place: train/toolkit/hang.py's)."""
    if place["at"] == "sync":
        return f"rank {peer} waited in its {place['how']} instead"
    if place["at"] == "paired":  # an async save's collectives and training's on one group (torch_loop/async_save.py)
        return f"rank {peer} {place['how']}"
    skipped = "skipped the load and " if any(e["rank"] == peer and e["event"] == "skip" for e in events) else ""
    if place["at"] == "end":
        return f"rank {peer} {skipped}went on to the end of the run without entering it"
    return f"rank {peer} {skipped}had left the run without entering it"  # done


def hang_detail(hang: Event, events: list[Event]) -> str:
    """What a hang event says: which sync could never end, and where each peer it waited for was."""
    peers = [_place(int(r), hang["peers"][str(r)], events) for r in hang["waiting_for"]]
    return f"its {hang['sync']} could never end: " + "; ".join(peers)


def _broken(rank: int, failed: Event, events: list[Event], failures: list[Event]) -> tuple[str, str]:
    """(outcome, detail) of a sync that failed (sync_error{how}), or of a framework's call that raised after the
    load (train_error{what}): timed out, broken by a peer's death, an interrupt or peers that had given up, or
    its own error."""
    how = failed.get("how") or failed.get("what") or "sync"
    if failed["event"] == "sync_error" and failed.get("timed_out"):
        return "timeout", _timeout_detail(events, failed, rank)
    # a framework's collective after the load: gloo says "Timed out waiting ..." or, on the other side of a pair
    # that timed out, "Application timeout caused pair closure" (error_fields' timed_out misses the second)
    if failed["event"] == "train_error" and (failed.get("timed_out") or "timeout" in failed["message"].lower()):
        return "timeout", f"{how}: {failed['error_type']}: {short(failed['message'])}"
    peers = sorted({e["failed_rank"] for e in failures} - {rank})
    if peers:  # it broke because a peer died: the peer's failure, not its own
        return "aborted", f"its {how} broke when {ranks_text(peers)} died"
    if launch_status([e for e in events if e["rank"] == "launcher"]) == "interrupted":
        return "aborted", f"its {how} broke when the run was interrupted"
    gave_up = sorted({e["rank"] for e in events if e["event"] == "sync_error" and e.get("timed_out")
                      and e["t"] <= failed["t"]} - {rank})
    if gave_up:  # it came late, after its peers had stopped waiting
        return "aborted", f"its {how} broke: {ranks_text(gave_up)} had stopped waiting"
    return "error", f"{how}: {failed['error_type']}: {short(failed['message'])}"


AFTER_LOAD = "after its load, "  # the start of the detail of a rank whose load ended well and something after it did not


def _after_load(rank: int, mine: list[Event], events: list[Event], done: Event,
                failures: list[Event]) -> Optional[tuple[str, str, str]]:
    """What went wrong on this rank after its load ended well, as (outcome, detail, log), or None: a sync that
    failed or could never end, its framework's call that raised after the load (train_error: Lightning's
    validate, whose error the adapter says and records instead of raising), or its death (the launcher's
    rank_failed). Such a rank is never `loaded`."""
    later = sorted((e for e in mine if e["event"] in ("sync_error", "train_error", "hang") and e["t"] >= done["t"]),
                   key=lambda e: e["t"])
    if later and later[0]["event"] == "hang":
        return "hung", AFTER_LOAD + hang_detail(later[0], events), ""
    if later:
        outcome, detail = _broken(rank, later[0], events, failures)
        return outcome, AFTER_LOAD + detail, ""
    died = [e for e in failures if e["failed_rank"] == rank]
    if died:
        why = (died[-1].get("message") or f"exit code {died[-1]['exitcode']}") + raised_at(mine)
        return "error", f"{AFTER_LOAD}it died ({why})", died[-1].get("log", "")
    return None


def raised_at(mine: list[Event]) -> str:
    """Where the exception that ended this rank's run was raised (rank_error's innermost frame), if it left one."""
    raised = last_event(mine, "rank_error")
    return f", raised in {short_path(raised['at'])}" if raised and raised.get("at") else ""


def _last_save_began(events: list[Event]) -> Optional[Event]:
    """The start of the run's last save: the first save_start of the last epoch any rank began to save."""
    starts = [e for e in events if e["event"] == "save_start"]
    if not starts:
        return None
    last = max(e.get("epoch", 0) for e in starts)
    return min((e for e in starts if e.get("epoch", 0) == last), key=lambda e: e["t"])


def _what_it_loaded(mine: list[Event], events: list[Event], done: Event) -> tuple[str, str]:
    """(loaded or stale, detail) by the weights it read. A rank that read the last finished save before the last
    save began read a stale checkpoint too: that save then failed (or never finished), so the file it read was
    older than the one the run was writing."""
    written = saves(events)
    if written and done["digest"] == written[-1]["digest"]:
        began = _last_save_began(events)
        read_at = (last_event(mine, "load_attempt") or done)["t"]
        if began and written[-1]["t"] < began["t"] and read_at < began["t"]:
            failed = any(e["event"] == "save_error" and e["t"] >= began["t"] for e in events)
            return "stale", (f"loaded the epoch-{written[-1].get('epoch', 0)} save, read {secs(began['t'] - read_at)} s "
                             f"before rank {began['rank']}'s save of epoch {began.get('epoch', 0)} began; that save "
                             f"then {'failed' if failed else 'never finished'}")
        return "loaded", ""
    older = [s for s in written if s["digest"] == done["digest"]]
    if older:
        return "stale", f"loaded the epoch-{older[-1]['epoch']} save"
    peer = _peer_it_took(events, done)
    if peer is not None:  # it holds a peer's weights, which no save wrote: it took them, and loaded nothing
        said = f" (it said: {done['said']})" if done.get("said") else ""
        return "skipped", f"it holds rank {peer}'s weights, which no checkpoint holds{said}"
    return "stale", "loaded a file this run never wrote"


def _peer_it_took(events: list[Event], done: Event) -> Optional[int]:
    """The rank whose final weights this rank's load_done holds, when they came from no file on its disk
    (from_disk false) and that rank loaded nothing (its skip); else None."""
    if done.get("from_disk") is not False:
        return None
    skipped = {e["rank"] for e in events if e["event"] == "skip"}
    return next((e["rank"] for e in events if e["event"] == "final" and e["rank"] != done["rank"] and
                 e["rank"] in skipped and e["digest"] == done["digest"]), None)


def classify_rank(rank: int, events: list[Event]) -> RankOutcome:
    """events: the whole run's events (all ranks and the launcher)."""
    mine = [e for e in events if e["rank"] == rank]
    launcher = [e for e in events if e["rank"] == "launcher"]
    written = saves(events)
    last_written = written[-1] if written else None
    final = last_event(mine, "final")

    def result(outcome: str, detail: str = "", log: str = "") -> RankOutcome:
        return RankOutcome(rank, outcome, detail, rank_timings(mine, events), final["digest"] if final else "", log)

    your_part = yours(mine)  # your code (fix=own) read too early or raised: that decides, whatever loaded after it
    if your_part:
        return result(*your_part)
    failures = [e for e in launcher if e["event"] == "rank_failed"]
    done = last_event(mine, "load_done")
    if done:
        outcome, detail = _what_it_loaded(mine, events, done)
        after = _after_load(rank, mine, events, done, failures)
        if after and outcome == "stale":  # the wrong read is the news; what failed after it is said too
            return result("stale", f"{detail}; {after[1]}", after[2])
        return result(*after) if after else result(outcome, detail)

    failed = last_event(mine, "load_error")
    if failed:
        outcome = classify_load_error(failed["error_type"], failed["message"], failed.get("in_reader", False))
        seen = (last_event(mine, "load_attempt") or {}).get("bytes")
        if outcome == "error" and last_written and seen is not None and seen < last_written.get("bytes", 0):
            outcome = "corrupt"  # it read a file shorter than the finished checkpoint
        return result(outcome, load_error_sentence(failed["error_type"], failed["message"]))

    hung = last_event(mine, "hang")
    if hung:  # before its own exit code: the rank was ended on purpose, the moment the hang was certain
        return result("hung", hang_detail(hung, events))

    sync = last_event(mine, "sync_error") or last_event(mine, "train_error")  # a framework's call that raised
    if sync:
        return result(*_broken(rank, sync, events, failures))

    skipped = last_event(mine, "skip")
    if skipped:
        return result("skipped", skipped["reason"])
    if last_event(mine, "crash"):
        return result("crashed", "it died where the scenario placed a crash (fault.crash_rank)")
    died = [e for e in failures if e["failed_rank"] == rank]
    if died:
        return result("error", (died[-1].get("message") or f"exit code {died[-1]['exitcode']}") + raised_at(mine),
                      died[-1].get("log", ""))
    status = launch_status(launcher)
    if status == "timeout":
        return result("timeout", "stopped by the launcher at timeout.run_s")
    if not last_event(mine, "rank_end") and status in ("failed", "interrupted", "harness_error", None):
        why = {"failed": "after a peer failed", "interrupted": "on interrupt"}.get(status or "", "")
        return result("aborted", f"stopped by the launcher {why}".strip())
    return result("error", "ended without loading")


TIMED = ("fit_start", "train_end", "save_start", "save_end", "save_error", "sync_enter", "sync_exit", "sync_error",
         "hang", "skip", "load_attempt", "load_done", "load_error", "final", "rank_end")


def rank_timings(mine: list[Event], events: list[Event]) -> dict[str, float]:
    """Seconds since launch_start for this rank's milestones, and how its load stood against the last save."""
    starts = [e["t"] for e in events if e["event"] == "launch_start"]
    t0 = min(starts) if starts else min(e["t"] for e in events)
    out = {}
    for name in TIMED:
        e = last_event(mine, name)
        if e:
            out[name] = round(e["t"] - t0, 3)
    enter = last_event(mine, "sync_enter")
    left = min((e for e in mine if e["event"] in ("hang", "sync_exit", "sync_error") and enter and e["t"] >= enter["t"]),
               key=lambda e: e["t"], default=None)  # the end of its last sync: the first hang, exit or error after it
    if enter and left:
        out["wait"] = round(left["t"] - enter["t"], 3)  # how long its sync held it
    written = saves(events)
    attempt = last_event(mine, "load_attempt")
    if written and attempt:
        # negative: this rank started reading before the last save had ended
        out["load_after_save_end"] = round(attempt["t"] - written[-1]["t"], 3)
    return out


def decide(outcomes: list[RankOutcome], events: list[Event], status: Optional[str]) -> str:
    kinds = {o.outcome for o in outcomes}
    if status == "interrupted":
        return "interrupted"
    if status == "harness_error" or "error" in kinds:
        return "error"
    failed = last_event(events, "save_error")
    if kinds == {"loaded"} and not failed:  # a run in which a save failed is never clean
        return "clean"
    if failed and kinds == {"skipped"} and replicas(outcomes) == "agree" and \
            all(says_save_failed(events, o.rank) for o in outcomes):
        return "save_failed"
    return "race"


def judge_load_best(events: list[Event], world_size: int) -> Verdict:
    """A load-best run's verdict over every rank's outcome (see train/judge/vocabulary.py)."""
    outcomes = [classify_rank(r, events) for r in range(world_size)]
    verdict = decide(outcomes, events, launch_status([e for e in events if e["rank"] == "launcher"]))
    agreement = replicas(outcomes)
    return Verdict(verdict, explain(outcomes, events, verdict, agreement), agreement, outcomes)
