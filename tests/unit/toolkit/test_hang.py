"""A hang named the moment it is certain (train/toolkit/hang.py): the rule, from hand-made places.

With real gloo ranks in tests/e2e/test_cells.py (its one side-by-side fixture, read by every real-rank test there):
when the ranks disagree on the file, rank 0 waits in a collective that rank 1 went past; the run names it at once
(a hang event, no timed-out wait) and ends. Where rank 0 is merely late (the seed: it stalls before its last save
while rank 1 waits), nothing fires and the ranks meet. Two ranks paired in two different collectives (a fix of
the tests' own, tests/own_classes/mismatched_syncs.py) have no peer at the end to release them: they are ended with EXIT_HUNG.
"""
import pytest
import torch.distributed as dist

from train.faults import ends_when_settled
from train.toolkit import hang


def sync(how, n):
    return {"at": "sync", "how": how, "n": n, "t": 0.0}


@pytest.mark.parametrize("peer, never", [
    ({"at": "end", "n": 0}, True),  # it went on to the end without entering this sync
    ({"at": "done", "n": 1}, True),
    ({"at": "end", "n": 2}, False),  # it entered this sync (and left it, by its own timeout): not certain
    ({"at": "work", "n": 1}, False),  # training, a stall, a save, a load: it may still come
    (sync("barrier", 2), False),  # the same sync: they meet
    (sync("agree", 1), False),  # a collective before this one: it is behind and may still come
    (sync("agree", 2), True),  # a different collective in this one's place
    (sync("file", 2), False),  # a file wait is no collective: it may still come
])
def test_only_a_peer_that_can_never_come_to_this_sync_counts(peer, never):
    assert hang.unreachable(sync("barrier", 2), {**peer, "t": 0.0}) is never


def test_a_rank_counts_in_at_the_end_once_and_the_last_one_releases_every_rank():
    server = dist.TCPStore("127.0.0.1", 0, 1, True)
    hang._counted = False
    try:
        hang.count_in(server, 2)
        hang.count_in(server, 2)  # the hung rank's watcher, then its own way to the end: counted once
        assert not server.check([hang.ALL_DONE])
        assert server.add(hang.DONE, 1) == 2  # the peer's count: the last
    finally:
        hang._counted = False


@pytest.mark.parametrize("peer, settled", [
    ({"at": "end", "n": 0, "t": 5.0}, True),  # past its load: nothing it does can change any more
    ({"at": "done", "n": 1, "t": 5.0}, True),
    ({"at": "work", "n": 0, "t": 5.0}, False),  # training, loading, a file wait: it may still read
    ({**sync("barrier", 1), "t": 5.0}, True),  # waits in a barrier that outlasts the stall (60 s from 5.0)
    ({**sync("barrier", 1), "t": 10.0 + 1 - 60}, False),  # its barrier times out 1 s after the stall's end: too soon
    ({**sync("barrier", 1), "t": 10.0 + 1.1 - 60}, True),
    ({**sync("file", 1), "t": 5.0}, False),  # a wait that is no collective can end by itself
])
def test_a_stall_ends_early_only_once_a_peer_can_change_nothing_but_how_long_it_waits(peer, settled):
    """The stall would end at 10.0; the peers' collectives time out after 60 s; SETTLED_MARGIN_S is 1 s."""
    assert hang.SETTLED_MARGIN_S == 1.0
    assert hang.settled(peer, stall_ends=10.0, collective_s=60.0) is settled


@pytest.mark.parametrize("name, end_when_settled, misdetect_rank, early", [
    ("skew", True, False, True),  # the skew, before the last save or halfway through its write
    ("skew", False, False, False),  # a single run and make sweep keep the whole stall
    ("skew", True, True, False),  # many_writers: a peer's barrier may be a no-op of its own, not a wait for rank 0
    ("read_delay", True, False, False),  # only rank 0's skew ends early
])
def test_only_the_skew_ends_when_settled_and_never_where_ranks_are_misdetected(name, end_when_settled,
                                                                             misdetect_rank, early):
    """many_writers x barrier was clean in 1 of 5 runs: rank 0's mid-write stall ended as rank 1 passed through its
    no-op barrier, before rank 1 read (race-lab check framework=fastai, 2026-12-03)."""
    assert ends_when_settled(name, {"end_when_settled": end_when_settled},
                             {"misdetect_rank": misdetect_rank}) is early
