"""train/judge/own_reads.py: a read by your code followed by a save the same rank began (a digest of what an earlier
save wrote, as a copied Rank0Leads takes for its marker) is part of that earlier save, not a read of what the rank
ends with, however the file changed later; with no save of this rank after it, the same read is stale
(docs/fixes/accelerate.md's copy on save_fails: rank 0 hashed the folder's files at a save, then a peer wrote its
file again and rank 0's own last save failed)."""
from helpers.judge_events import ev, launch, loader, outcome, saver

MINE = "/home/me/copied/rank0_leads.py:77"
PATH = "/runs/x/best/random_states_1.pkl"


def events_with(save_rank: int) -> list:
    """Rank 1 loads; rank 1's code of yours read the file at t=5, `save_rank` began a save at t=6, and the file
    the rank read was written again before it ended."""
    return sorted([*launch(), *saver(), *loader(1, 12.5, digest="w-last"),
                   ev(5, 1, "file_op", op="open", mode="r", path=PATH, by=MINE, exists=True, bytes=14497, inode=7,
                      mtime_ns=1_000),
                   ev(6, save_rank, "save_start", epoch=2, path="/runs/x/best/model.safetensors"),
                   ev(13, 1, "file_state", path=PATH, by=MINE, exists=True, bytes=14497, inode=7, mtime_ns=2_000)],
                  key=lambda e: e["t"])


def test_a_read_before_a_save_of_the_same_rank_is_not_what_it_ends_with():
    assert outcome(1, events_with(1)) == "loaded"


def test_the_same_read_with_no_save_of_its_own_after_it_is_stale():
    assert outcome(1, events_with(0)) == "stale"
