"""Ctrl-C as a terminal sends it: python -m train in its own process group, SIGINT to the group at a chosen
moment; and what a run stopped at once leaves (exit 130, nothing saved or loaded after the signal, no process)."""
from pathlib import Path

from conftest import processes_tagged, tagged_env
from train.bench.measure import events_below, sigint_at  # noqa: F401 (events_below: the tests' too)

# At once, not by a timeout: a measured stop takes 0.2-0.6 s on 2 idle cores, but over 2 s on 2 cores loaded by
# others (a sweep's workers, other engineers' tests); the bound separates that from a stop by a timeout (torch
# elastic's 30 s kill, timeout.collective_s=60). How fast it stops is a speed goal, for make bench, not a test.
STOP_WITHIN_S = 10.0


def interrupt(root: Path, args: list, *, after: float, whole_group: bool = True, when=None, sigint_ignored=False):
    """make bench's sigint_at (train/bench/measure.py), with every process it starts tagged by root; by default
    the signal comes once rank 0 has started fitting."""
    when = when or (lambda events: [e for e in events if e["rank"] == 0 and e["event"] == "fit_start"])
    return sigint_at(root, args, when, after, whole_group=whole_group, sigint_ignored=sigint_ignored,
                     env=tagged_env(str(root)))


WENT_ON = ("save_start", "save_end", "load_attempt", "load_done", "resume", "train_end", "final", "rank_end")


def went_on_after_the_signal(events: list) -> list:
    """(rank, event) for each save, load or end a rank recorded after it took the signal (its `interrupted`; a
    rank torch elastic restarts goes on in the same file as the next attempt). Between the signal's sending and its
    taking a rank may record: the kernel, a busy core and Python's GIL delay it by milliseconds, and in a check it
    travels through the sweep, a worker and an agent."""
    took_at = {(e["file"], e.get("attempt")): e["t"] for e in events if e["event"] == "interrupted"}
    return [(e["rank"], e["event"]) for e in events if e["event"] in WENT_ON
            and e["t"] > took_at.get((e["file"], e.get("attempt")), e["t"])]


def assert_stopped_at_once(root: Path, rc, took, sent, out, ranks=2):
    assert rc == 130, out[-3000:]
    assert took < STOP_WITHIN_S, f"the run took {took:.1f} s to stop"
    events = events_below(root)
    took_it = {e["rank"] for e in events if e["event"] == "interrupted"}
    assert took_it == set(range(ranks))  # every rank recorded the signal it stopped on
    assert went_on_after_the_signal(events) == []
    assert not processes_tagged(str(root))
    assert "Traceback" not in out
