"""train/fixes.py's collectives on two real gloo ranks (issue 43), where what the ranks send each other is the
point: rank 0's list is every rank's, and the tag agreed_tag returns is the newest that every rank holds whole, also
when the ranks disagree on which tags they hold (no scenario of the matrix has them disagree)."""
from helpers.gloo import on_two_ranks
from helpers.recorded import Events
from train.fixes import agreed_tag

TAGS = ["global_step30", "global_step20", "global_step10"]  # newest first, as DeepSpeed's resume lists them


def agreed_on_two_ranks(tmp_path, held, listed=(TAGS, ["global_step40"])):
    """What agreed_tag returns on each rank when rank r holds the tags held[r] whole and lists listed[r] (rank 0's
    list is the one that counts), with each rank's recorded syncs."""
    def body(rank):
        events = Events()
        tag = agreed_tag(events, lambda: listed[rank], lambda t: t in held[rank])
        return tag, [(e["event"], e["how"]) for e in events.recorded]
    return on_two_ranks(tmp_path, body)


def test_ranks_that_hold_different_tags_agree_on_the_newest_both_hold_whole(tmp_path):
    """Rank 0 holds step 30 whole and rank 1 does not (its shard never landed): both take step 20, not 30."""
    got = agreed_on_two_ranks(tmp_path, [set(TAGS), {"global_step20", "global_step10"}])
    assert [tag for tag, _ in got] == ["global_step20", "global_step20"]
    syncs = [("sync_enter", "agree"), ("sync_exit", "agree")] * 2  # rank 0's list, then the all-reduce
    assert [recorded for _, recorded in got] == [syncs, syncs]


def test_ranks_that_each_lack_a_different_newer_tag_agree_on_the_newest_they_share(tmp_path):
    """Rank 0 lacks step 20, rank 1 lacks step 30: neither is whole on both, so both take step 10."""
    got = agreed_on_two_ranks(tmp_path, [{"global_step30", "global_step10"}, {"global_step20", "global_step10"}])
    assert [tag for tag, _ in got] == ["global_step10", "global_step10"]


def test_no_tag_every_rank_holds_whole_is_none_on_every_rank(tmp_path):
    got = agreed_on_two_ranks(tmp_path, [{"global_step30"}, {"global_step20"}])
    assert [tag for tag, _ in got] == [None, None]
    nothing_listed = agreed_on_two_ranks(tmp_path / "none", [set(TAGS), set(TAGS)], listed=([], TAGS))
    assert [tag for tag, _ in nothing_listed] == [None, None]  # rank 0 found no tag: none, though rank 1 lists some
