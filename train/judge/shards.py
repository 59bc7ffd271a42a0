"""Sharded state: which step each rank's resume really read. Pure functions over event records, framework-free
(torch.distributed.checkpoint's per-rank files here; DeepSpeed's per-rank ZeRO files use the same records).

A sharded checkpoint is several files, one written by each rank; a resume reads them all. Every load call can
return and the state still mix two steps: a save over an existing folder that died part-way leaves some ranks'
files new and the old commit marker (.metadata) in place (torch's FileSystemWriter overwrites by default), and a
rank that found no checkpoint starts fresh while its peers resume. Nothing raises. The records that show it:

  shard_write{step, shard, digest}        the saving rank wrote shard `shard` (its rank in the save) of `step`,
                                          with this digest of its tensors (recorded when the write returned,
                                          whether or not the save was ever committed)
  shard_read{step, shard, digest, path}   a resuming rank read shard `shard` of the checkpoint at `path`, which
                                          says it is `step`, and got tensors with this digest
  resume{step, path}                      the step the rank resumed from (path null: a fresh start)

A resume is `mixed` (a rank outcome; never clean) when, within one attempt whose ranks read shards:
  - its ranks resumed from different steps (one of them from none: a fresh start beside peers that resumed);
  - a shard it read has the digest some rank wrote for another step, and not the one written for its own.
An attempt with no shard_read (whole-file checkpoints, each one step) is left to the resume verdict's own rules:
ranks that read different files diverge there (train/judge/resume.py).

A resume is from a checkpoint this run never wrote (`never_written`: a tag an older run left in the folder, as
DeepSpeed's `latest`) when no save of this run (save_start, save_end, save_dispatch, save_commit, shard_write)
names its step, and no shard it read holds any write of this run: the resume verdict calls it stale, never clean.
"""
from typing import Any

from train.judge.vocabulary import Event



def attempt_of(event: Event) -> int:
    return int(event.get("attempt", 0))


def written(events: list[Event]) -> dict[tuple[int, int], set[str]]:
    """(step, shard) -> the digests the saving ranks wrote for it, over the whole run (every attempt)."""
    out: dict[tuple[int, int], set[str]] = {}
    for e in events:
        if e["event"] == "shard_write":
            out.setdefault((e["step"], e["shard"]), set()).add(e["digest"])
    return out


def steps_of(writes: dict[tuple[int, int], set[str]], shard: int, digest: str) -> list[int]:
    """The steps whose write of `shard` had this digest."""
    return sorted(step for (step, s), digests in writes.items() if s == shard and digest in digests)


def foreign_shards(events: list[Event], rank: int, attempt: int,
                   writes: dict[tuple[int, int], set[str]]) -> list[dict[str, Any]]:
    """The shards this rank read in this attempt whose digest is another step's write and not its own step's:
    [{shard, step (what the checkpoint said), written_at (the steps whose write it matches), path}]."""
    found = []
    for e in events:
        if e["event"] != "shard_read" or e["rank"] != rank or attempt_of(e) != attempt:
            continue
        own = e["digest"] in writes.get((e["step"], e["shard"]), set())
        others = [s for s in steps_of(writes, e["shard"], e["digest"]) if s != e["step"]]
        if others and not own:
            found.append({"shard": e["shard"], "step": e["step"], "written_at": others, "path": e.get("path")})
    return found


def mixed_resumes(events: list[Event], world_size: int) -> dict[int, str]:
    """rank -> why its resume was mixed (one sentence naming the rank, its shards and steps), for every rank
    whose resume mixed steps in any attempt; the last attempt's reason when several did."""
    writes, why = written(events), dict[int, str]()
    resumes = [e for e in events if e["event"] == "resume" and isinstance(e["rank"], int)]
    for n in sorted({attempt_of(e) for e in resumes}):
        now = {e["rank"]: e for e in resumes if attempt_of(e) == n}
        if not any(e["event"] == "shard_read" and attempt_of(e) == n for e in events):
            continue  # whole files, no shards: each rank's file is one step (a divergence is judged as such)
        steps = {r: (e["step"] if e.get("path") else None) for r, e in now.items()}
        resumed = {s for s in steps.values() if s is not None}
        for rank in range(world_size):
            if rank not in now:
                continue
            parts = []
            mine = steps[rank]
            others = {r: s for r, s in steps.items() if r != rank and s != mine}
            if mine is None and resumed:
                parts.append(f"it started fresh while {_peers(others)}")
            elif others:
                parts.append(f"it resumed from step {mine} while {_peers(others)}")
            for f in foreign_shards(events, rank, n, writes):
                parts.append(f"shard {f['shard']} it read as step {f['step']} holds what rank {f['shard']} wrote "
                             f"at step {_steps(f['written_at'])}")
            if parts:
                why[rank] = f"attempt {n}: " + "; ".join(parts)
    return why


SAVE_EVENTS = ("save_start", "save_end", "save_dispatch", "save_commit", "shard_write")


def never_written(events: list[Event]) -> dict[int, str]:
    """rank -> why a resume of it read a checkpoint this run never wrote (one sentence naming the checkpoint and its
    step), for every rank that resumed with shard reads from a step none of this run's saves names and whose shards
    match no write of this run; the last such attempt's reason."""
    steps = {e.get("step") for e in events if e["event"] in SAVE_EVENTS}
    digests = {e["digest"] for e in events if e["event"] == "shard_write"}
    why = {}
    for e in sorted((e for e in events if e["event"] == "resume" and isinstance(e["rank"], int) and e.get("path")),
                    key=attempt_of):
        n = attempt_of(e)
        reads = [r for r in events if r["event"] == "shard_read" and r["rank"] == e["rank"] and attempt_of(r) == n]
        if reads and e["step"] not in steps and not any(r["digest"] in digests for r in reads):
            name = str(e["path"]).rstrip("/").rsplit("/", 1)[-1]
            shards = f"none of the {len(reads)} shards it read holds a" if len(reads) > 1 else "the shard it read holds no"
            why[e["rank"]] = (f"attempt {n}: it resumed from {name} (step {e['step']}), a checkpoint this run never "
                              f"wrote: no save of this run reached step {e['step']} and {shards} write of this run "
                              f"(a tag an older run left)")
    return why


def _peers(others: dict[int, Any]) -> str:
    return ", ".join(f"rank {r} " + ("started fresh" if s is None else f"resumed from step {s}")
                     for r, s in sorted(others.items()))


def _steps(steps: list[int]) -> str:
    return " or ".join(str(s) for s in steps)
