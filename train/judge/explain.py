"""A load-best run's verdict in words: what each rank did, and why that makes the verdict."""
from typing import Optional

from train.judge.own_reads import YOUR_RAISE, YOUR_READ, short_path
from train.judge.vocabulary import (
    ONLY_WARNED,
    Event,
    RankOutcome,
    last_event,
    ranks_text,
    saves,
    says_save_failed,
    secs,
    short,
    span,
)


def replicas(outcomes: list[RankOutcome]) -> str:
    digests = [o.final_digest for o in outcomes]
    if not all(digests):
        return "unknown"
    return "agree" if len(set(digests)) == 1 else "diverged"


def _diverged_part(outcomes: list[RankOutcome]) -> str:
    by_digest: dict[str, list[int]] = {}
    for o in outcomes:
        by_digest.setdefault(o.final_digest, []).append(o.rank)
    groups = sorted(by_digest.values())
    return "the replicas diverged: " + " vs ".join(ranks_text(g) for g in groups) + " end with different weights"


def explain(outcomes: list[RankOutcome], events: list[Event], verdict: str, agreement: str) -> str:
    """One sentence on what happened, worst news first."""
    by: dict[str, list[RankOutcome]] = {}
    for o in outcomes:
        by.setdefault(o.outcome, []).append(o)
    written = saves(events)
    saver = f"rank {written[-1]['rank']}" if written else "the saving rank"
    save_error = last_event(events, "save_error")
    failed_save = f"rank {save_error['rank']}'s save failed ({save_error['error_type']}: " \
        f"{short(save_error['message'])})" if save_error else ""

    if verdict == "interrupted":
        sig = next((e for e in events if e["event"] == "signal"), None)  # the first: what stopped the run
        return f"interrupted: the run was stopped{' by ' + sig['name'] if sig else ''} before it ended; no verdict"
    if verdict == "error":
        launch_error = last_event(events, "launch_error")
        if launch_error:
            return f"error: the launch failed ({launch_error['error_type']}: {launch_error['message']})"
        failed = by.get("error", [])
        return "error: " + "; ".join(f"rank {o.rank} failed ({o.detail}"
                                     + (f"; traceback in {o.log})" if o.log else ")") for o in failed)
    if verdict == "save_failed":
        return f"save_failed: {failed_save}; every rank says so and none loaded, so all hold the same weights"

    def early(group: list[RankOutcome]) -> Optional[list[float]]:
        leads = [-o.timings["load_after_save_end"] for o in group if "load_after_save_end" in o.timings]
        return leads if leads and min(leads) > 0 else None

    parts = []
    if save_error:
        parts.append(failed_save)
        if by.get("loaded"):  # they hold the last save that finished, not the one that failed
            epoch = f" (epoch {written[-1]['epoch']})" if "epoch" in written[-1] else ""
            parts.append(f"{ranks_text(o.rank for o in by['loaded'])} loaded the last checkpoint that finished{epoch}")
    for name in ("missing", "corrupt", "unsafe", "stale", "raised"):
        group = by.get(name, [])
        if not group:
            continue
        leads = early(group)
        what = {"missing": "tried to load", "corrupt": "read a partly written checkpoint",
                "unsafe": "refused a checkpoint that holds code (weights_only=True)",
                "stale": "loaded an older checkpoint", "raised": "failed in your code"}[name]
        if name == "stale":
            what += f" ({group[0].detail.removeprefix('loaded ')})"
            read = last_event([e for e in events if e["rank"] == group[0].rank], "load_done")
            what += f" from {short_path(read['path'])}" if read and read.get("path") else ""  # the file it read
        not_here = _not_on_this_node(events, group, written[-1]) if name == "missing" and written else ""
        when = f" {span(leads)} before {saver} finished saving" if leads and name != "unsafe" and not not_here else \
            (" and no save finished" if not written and name == "missing" else "")  # not on its disk: never
        why = f" ({group[0].detail.split(':')[0]})" if name in ("missing", "corrupt") and group[0].detail else ""
        if name == "missing" and ONLY_WARNED in group[0].detail:  # no error raised: say what the framework did
            why = f" ({group[0].detail.split(' (')[0]})"
        if group[0].detail.startswith((YOUR_READ, YOUR_RAISE)):  # your code's read or raise (own_reads.py): where
            what, when, why, not_here = what.split(" (")[0], "", f" ({group[0].detail})", ""
        why += not_here
        parts.append(f"{ranks_text(o.rank for o in group)} {what}{when}{why}")
    if by.get("skipped"):
        parts.append(f"{ranks_text(o.rank for o in by['skipped'])} skipped the load ({by['skipped'][0].detail})")
    if by.get("timeout"):
        raised = {e["rank"] for e in events if e["event"] == "train_error"}  # no sync of theirs timed out
        waits = [o.timings["wait"] for o in by["timeout"] if "wait" in o.timings and o.rank not in raised]
        waited = f" after {span(waits)}" if waits else ""
        parts.append(f"{ranks_text(o.rank for o in by['timeout'])} timed out{waited} ({by['timeout'][0].detail})")
    for o in by.get("hung", []):
        parts.append(f"rank {o.rank} hung ({o.detail}; ended at once, not at timeout.collective_s)")
    if by.get("crashed"):
        parts.append(f"{ranks_text(o.rank for o in by['crashed'])} crashed on purpose")
    if by.get("aborted"):
        end = last_event(events, "launch_end")
        why = "by an interrupt" if end and end["status"] == "interrupted" else "after a peer failed"
        parts.append(f"{ranks_text(o.rank for o in by['aborted'])} stopped {why}")
    unaware = [o.rank for o in outcomes if o.outcome in ("loaded", "skipped") and not says_save_failed(events, o.rank)]
    if save_error and unaware:
        parts.append(f"{ranks_text(unaware)} never said the save failed")
    if agreement == "diverged":
        parts.append(_diverged_part(outcomes))
    if verdict == "race":
        return "race: " + "; ".join(parts)

    others = [o for o in outcomes if not written or o.rank != written[-1]["rank"]]
    after = [o.timings["load_after_save_end"] for o in others if "load_after_save_end" in o.timings]
    tail = f"; {ranks_text(o.rank for o in others)} started loading {span(after)} after the save ended" \
        if others and after and min(after) >= 0 else ""
    traps = _traps(events, written)
    avoided = f". The trap it avoided: {'; '.join(traps)}" if traps else ""
    return f"clean: every rank loaded the last checkpoint {saver} wrote{tail}{avoided}"


def _node(events: list[Event], rank: int) -> int:
    start = next((e for e in events if e["rank"] == rank and e["event"] == "rank_start"), None)
    return int(start.get("node", 0)) if start else 0


def _not_on_this_node(events: list[Event], group: list[RankOutcome], last_save: Event) -> str:
    """Why ranks that read after the save ended found no file: the file is on another node's own disk."""
    saved_on = _node(events, last_save["rank"])
    elsewhere = sorted({_node(events, o.rank) for o in group} - {saved_on})
    local = any(e["event"] == "fit_start" and e.get("node_local") for e in events)
    if not (elsewhere and local):
        return ""
    nodes = ", ".join(f"node {n}" for n in elsewhere)
    return f": the file is on node {saved_on}'s own disk; {nodes}'s disk has none"


def _settled_end(events: list[Event], start: Event) -> Optional[Event]:
    """The skew_end of this skew_start where the stall ended once every other rank was settled, else None."""
    end = next((e for e in events if e["event"] == "skew_end" and e["rank"] == start["rank"] and e["t"] >= start["t"]),
               None)
    return end if end is not None and end.get("settled") else None


SETTLED = "every other rank was past its load or waiting for it"


def _traps(events: list[Event], written: list[Event]) -> list[str]:
    """What in this run would have made a rank read the wrong thing, from the faults' own events."""
    traps = []
    for e in events:
        if e["event"] != "skew_start":
            continue
        end, planned = _settled_end(events, e), secs(e["seconds"])
        stalled = f"{secs(end['t'] - e['t'])} s of its {planned} s" if end else f"{planned} s"
        if e.get("at") == "mid_write":
            traps.append(f"rank {e['rank']} stalled {stalled} halfway through writing the checkpoint, so it existed "
                         "half-written" + (f" (by then {SETTLED})" if end else ""))
        elif end:
            traps.append(f"rank {e['rank']} was late at its last save: it stalled {stalled}, until {SETTLED}")
        else:
            traps.append(f"rank {e['rank']} was {stalled} late at its last save")
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
        traps.append(f"rank {longest['rank']} waited {secs(_wait_of(events, longest))} s {how}")
    return traps


SYNC_WAITS = {"barrier": "at the barrier", "file": "for the file", "agree": "for rank 0's decision",
              "broadcast": "for rank 0's broadcast of the weights"}


def _wait_of(events: list[Event], sync_exit: Event) -> float:
    entered = [e["t"] for e in events if e["rank"] == sync_exit["rank"] and e["event"] == "sync_enter"
               and e["t"] <= sync_exit["t"]]
    return sync_exit["t"] - max(entered) if entered else 0.0
