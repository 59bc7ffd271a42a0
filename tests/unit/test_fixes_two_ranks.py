"""train/fixes.py's collectives on two real gloo ranks (issue 43), where what the ranks send each other is the
point: rank 0's list is every rank's, and the tag agreed_tag returns is the newest that every rank holds whole, also
when the ranks disagree on which tags they hold (no scenario of the matrix has them disagree)."""
import json
from types import SimpleNamespace

import torch.distributed as dist

from helpers.gloo import on_two_ranks
from helpers.recorded import Events
from train.fixes import agreed_tag, complete_when_durable, watched
from train.toolkit import hang
from train.torch_private import default_store

TAGS = ["global_step30", "global_step20", "global_step10"]  # newest first, as DeepSpeed's resume lists them


def agreed_on_two_ranks(tmp_path, held, listed=(TAGS, ["global_step40"])):
    """What agreed_tag returns on each rank when rank r holds the tags held[r] whole and lists listed[r] (rank 0's
    list is the one that counts), with each rank's recorded syncs, the ranks that listed on it, and the place it
    published for the hang watch afterwards (where it is, and how many collectives it entered in agreed_tag)."""
    def body(rank):
        events, listings, entered = Events(), [], hang._entered
        tag = agreed_tag(events, lambda: listings.append(rank) or listed[rank], lambda t: t in held[rank])
        key, store = hang.where_key(rank), default_store()
        place = json.loads(store.get(key)) if store.check([key]) else None
        return tag, [(e["event"], e["how"]) for e in events.recorded], listings, place and (place["at"],
                                                                                           place["n"] - entered)
    return on_two_ranks(tmp_path, body)


def test_ranks_that_hold_different_tags_agree_on_the_newest_both_hold_whole(tmp_path):
    """Rank 0 holds step 30 whole and rank 1 does not (its shard never landed): both take step 20, not 30."""
    got = agreed_on_two_ranks(tmp_path, [set(TAGS), {"global_step20", "global_step10"}])
    assert [tag for tag, *_ in got] == ["global_step20", "global_step20"]
    syncs = [("sync_enter", "agree"), ("sync_exit", "agree")] * 2  # rank 0's list, then the all-reduce
    assert [recorded for _, recorded, *_ in got] == [syncs, syncs]
    assert [listings for *_, listings, _ in got] == [[0], []]  # rank 1 never lists: it takes rank 0's list
    assert [place for *_, place in got] == [("work", 2), ("work", 2)]  # both collectives watched, back at work


def test_ranks_that_each_lack_a_different_newer_tag_agree_on_the_newest_they_share(tmp_path):
    """Rank 0 lacks step 20, rank 1 lacks step 30: neither is whole on both, so both take step 10."""
    got = agreed_on_two_ranks(tmp_path, [{"global_step30", "global_step10"}, {"global_step20", "global_step10"}])
    assert [tag for tag, *_ in got] == ["global_step10", "global_step10"]


def test_no_tag_every_rank_holds_whole_is_none_on_every_rank(tmp_path):
    got = agreed_on_two_ranks(tmp_path, [{"global_step30"}, {"global_step20"}])
    assert [tag for tag, *_ in got] == [None, None]
    nothing_listed = agreed_on_two_ranks(tmp_path / "none", [set(TAGS), set(TAGS)], listed=([], TAGS))
    assert [tag for tag, *_ in nothing_listed] == [None, None]  # rank 0 found no tag: none, though rank 1 lists some


def test_the_completion_step_waits_in_a_barrier_of_the_saves_group_alone(tmp_path):
    """A save that rank 0 makes alone (a group of rank 0): its barrier is that group's, so rank 0 publishes while
    rank 1, outside the save, enters no barrier at all."""
    def body(rank):
        group = dist.new_group(ranks=[0], backend="gloo")  # every rank makes it, as new_group asks
        done, events = [], Events()
        if rank == 0:
            complete_when_durable(events, SimpleNamespace(result=lambda: done.append("durable")), group,
                                  lambda: done.append("published"))
        return done, events.syncs()
    assert on_two_ranks(tmp_path, body) == [(["durable", "published"], [("sync_enter", "barrier"),
                                                                         ("sync_exit", "barrier")]), ([], [])]


def test_a_barrier_that_a_peer_went_past_is_named_a_hang_in_the_waiting_ranks_events(tmp_path):
    """Rank 0 went on to its end without the barrier; rank 1's watch records the hang among its sync events and
    releases rank 0, whose leaving breaks rank 1's wait at once: watched says False, no timeout waited out."""
    def body(rank):
        if rank == 0:
            hang.publish("end")
            hang.count_in(default_store(), 2)
            default_store().wait([hang.ALL_DONE])  # released by rank 1's watch
            return None
        events = Events()
        ok = watched(events, "barrier", dist.barrier)
        return ok, [(e["event"], e["how"] if "how" in e else (e["sync"], e["waiting_for"])) for e in events.recorded]
    try:
        got = on_two_ranks(tmp_path, body)
    finally:
        hang._counted = False  # rank 0 counted itself in, in this process
    assert got == [None, (False, [("sync_enter", "barrier"), ("hang", ("barrier", [0])), ("sync_error", "barrier")])]
