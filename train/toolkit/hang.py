"""A hang named the moment it is certain (PyTorch's Flight Recorder / desync debug, for gloo and CPU ranks).

Each rank publishes where it is on torch.distributed's default store (the elastic agent's, which outlives
every rank), under race-lab/where/<rank>, as JSON:
  {"at": "sync", "how": "barrier", "n": N, "t": ...}  it waits in its N-th collective sync (train/fixes.py watched)
  {"at": "work", "n": N, "t": ...}   between syncs: training, a stall, a save, a load; it may come to any sync
  {"at": "end", "n": N, "t": ...}    its fit and load are over; it waits for every rank (train/rank/worker.py)
  {"at": "done", "n": N, "t": ...}   it is leaving
N counts the collective syncs (COLLECTIVES) the rank has entered so far; t is when it got there.

While a rank waits in a collective, a watcher thread reads its peers' places every POLL_S. A peer can never
come to this rank's N-th sync when (unreachable, pure):
  - it is at the end or done having entered fewer than N collectives: it went past this sync without it; or
  - it waits in a different collective as its own N-th: the ranks paired two different syncs.
Anything else (training, a stall, a file wait, a sync it has not reached yet, no place published) may still
come, and never counts: timeout.collective_s stays the backstop. Once it is certain, the watcher records
`hang{sync, n, waiting_for, peers, certain_at}`, says one line and counts this rank in at the end, which
releases the peers waiting there. As they leave, their connections close and the wait breaks at once, so
the rank goes on by its own path; a wait still held after PEERS_LEAVE_S (the peer waits in another sync)
ends the rank with os._exit(EXIT_HUNG), as a thread cannot interrupt gloo's C++ wait.

The same places end a stall placed on purpose (the skew) as soon as it can change nothing more: once every peer
is settled, past its load or waiting in a collective that outlasts the stall (stall_until_settled). What each
rank does is the same as after the whole stall; only the time it waits is shorter.
"""
import json
import os
import threading
import time
from contextlib import contextmanager
from datetime import timedelta

import torch.distributed as dist

from train.toolkit.rank import say
from train.torch_private import default_store

COLLECTIVES = ("barrier", "broadcast", "agree")  # watched waits that every rank must enter (train/fixes.py)
POLL_S = 0.1  # how often a watcher reads its peers' places
STORE_TIMEOUT_S = 2.0  # a store read that takes longer means the store is gone: the watcher stops
SETTLED_MARGIN_S = 1.0  # how much longer than a stall a peer's collective must last to count as settled
PEERS_LEAVE_S = 1.0  # after a hang, how long peers released from the end have to break the wait (os._exit then)
EXIT_HUNG = 124  # the hung rank's exit code (as coreutils' timeout: its wait was cut short)
DONE, ALL_DONE = "race-lab/done", "race-lab/all-done"  # ranks counted in at the end; set once all are

_entered = 0  # collective syncs this rank has entered (one process per rank)
_counted = False  # whether this rank has counted itself in at the end


def store():
    """torch.distributed's default store, or None before the process group exists."""
    return default_store() if dist.is_initialized() else None


def where_key(rank: int) -> str:
    return f"race-lab/where/{rank}"


def publish(at: str, **fields) -> dict:
    """Say on the store where this rank is (at: sync | work | end | done); returns what was published.
    Never raises: a store that is gone (its node was stopped) only means no peer learns it."""
    place = {"at": at, "n": _entered, "t": time.time(), **fields}
    try:
        s = store()
        if s is not None:
            s.set(where_key(dist.get_rank()), json.dumps(place))
    except (RuntimeError, dist.DistError):
        pass
    return place


def places(s, ranks) -> dict:
    """rank -> its published place, for those of `ranks` that published one."""
    found = {}
    for rank in ranks:
        if s.check([where_key(rank)]):  # check does not block; get would wait for a key not yet there
            found[rank] = json.loads(s.get(where_key(rank)))
    return found


def unreachable(mine: dict, peer: dict) -> bool:
    """Whether a peer at `peer` can never come to the collective sync this rank waits in (`mine`)."""
    if peer["at"] in ("end", "done"):
        return peer["n"] < mine["n"]  # it went on without entering this sync; it enters none any more
    if peer["at"] == "sync" and peer["how"] in COLLECTIVES:
        return peer["n"] == mine["n"] and peer["how"] != mine["how"]  # a different sync in this one's place
    return False


def settled(peer: dict, stall_ends: float, collective_s: float) -> bool:
    """Whether nothing a peer at `peer` does can change any more while a stall goes on until `stall_ends` (a
    time.time()): it is past its load (at the end, or done), or it waits in a collective sync that outlasts the
    stall by SETTLED_MARGIN_S, so only how long it waits there changes. A sync that would time out first is the
    scenario itself (outcome: timeout): not settled."""
    if peer["at"] in ("end", "done"):
        return True
    return (peer["at"] == "sync" and peer.get("how") in COLLECTIVES
            and peer["t"] + collective_s > stall_ends + SETTLED_MARGIN_S)


def stall_until_settled(seconds: float, collective_s: float) -> bool:
    """Sleep `seconds`, or less: until every other rank is settled (see settled). Returns whether it ended early.
    With no store or no peers, or a store that is gone, it sleeps the whole stall."""
    ends = time.time() + seconds
    if store() is None or dist.get_world_size() < 2:
        time.sleep(seconds)
        return False
    me, world_size = dist.get_rank(), dist.get_world_size()
    try:
        s = store().clone()  # its own connection, as the watcher's
        s.set_timeout(timedelta(seconds=STORE_TIMEOUT_S))
        while (left := ends - time.time()) > 0:
            peers = places(s, [r for r in range(world_size) if r != me])
            if len(peers) == world_size - 1 and all(settled(p, ends, collective_s) for p in peers.values()):
                return True
            time.sleep(min(POLL_S, left))
    except (RuntimeError, dist.DistError):
        pass
    time.sleep(max(0.0, ends - time.time()))
    return False


def count_in(s, world_size: int):
    """Count this rank in at the end, once; the last rank to count in releases every rank waiting there."""
    global _counted
    if _counted:
        return
    _counted = True
    if s.add(DONE, 1) == world_size:
        s.set(ALL_DONE, "1")


@contextmanager
def watch(events, how: str):
    """Around a wait named `how`: publish where this rank is, and for a collective watch that every peer
    can still come (see the module's docstring); afterwards, back at work."""
    global _entered
    if how not in COLLECTIVES or store() is None or dist.get_world_size() < 2:
        yield
        return
    _entered += 1
    mine = publish("sync", how=how)
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(events, mine, stop), name=f"watch-{how}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        publish("work")


def _watch(events, mine: dict, stop: threading.Event):
    me, world_size = dist.get_rank(), dist.get_world_size()
    try:
        s = store().clone()  # its own connection: the main thread may use the store meanwhile
        s.set_timeout(timedelta(seconds=STORE_TIMEOUT_S))
        while not stop.is_set():
            peers = places(s, [r for r in range(world_size) if r != me])
            blocked = sorted(r for r, p in peers.items() if unreachable(mine, p))
            if blocked and not stop.is_set():
                return _end_hung(events, s, mine, peers, blocked, world_size, stop)
            stop.wait(POLL_S)
    except (RuntimeError, dist.DistError):  # the store went away: nothing to watch, the timeout remains
        return


def _end_hung(events, s, mine: dict, peers: dict, blocked: list, world_size: int, stop: threading.Event):
    """Record the hang and release the peers waiting at the end. Once they leave, their connections close
    and the wait breaks, so the rank goes on by its own path within milliseconds; a wait still held after
    PEERS_LEAVE_S, or at once when no peer it waits for was at the end (one waits in another sync), ends
    the rank with os._exit."""
    certain_at = max([mine["t"]] + [peers[r]["t"] for r in blocked])  # when the last fact it rests on held
    events.record("hang", sync=mine["how"], n=mine["n"], waiting_for=blocked,
                  peers={str(r): p for r, p in sorted(peers.items())}, certain_at=certain_at)
    said = "; ".join(f"rank {r} " + (f"waits in its {peers[r]['how']}" if peers[r]["at"] == "sync"
                                      else f"is at the {peers[r]['at']}") for r in blocked)
    say(f"{mine['how']} can never end: {said}. Releasing the peers and ending this rank now, "
        "not at timeout.collective_s.")
    try:
        count_in(s, world_size)
    finally:
        released = any(peers[r]["at"] == "end" for r in blocked)
        if not stop.wait(PEERS_LEAVE_S if released else 0):  # gloo's C++ wait still held: no thread can end it
            os._exit(EXIT_HUNG)
