"""train/judge/own_reads.py from hand-made events: your code's last read of a checkpoint file decides a rank's
outcome when it came too early (no file yet, or a file written again after it); a read that found the file as it
ended, or a read by race-lab's or a framework's code (no `by`), leaves the adapters' events to judge."""
from helpers.judge_events import ev, launch, loader, outcome, saver
from train.judge.load_best import judge_load_best

MINE = "/home/me/mine/own_file.py:20"
PATH = "/runs/x/models/weights.pt"
FINAL = {"exists": True, "bytes": 16441, "inode": 7, "mtime_ns": 2_000}


def read(t, rank, by=MINE, **state):
    return ev(t, rank, "file_op", op="open", mode="r", path=PATH, **({"by": by} if by else {}), **state)


def run(*reads):
    """Rank 0 saves and loads as the adapter records it; rank 1 loads well too; plus the reads and end states."""
    return sorted([*launch(), *saver(), *loader(1, 12.5, digest="w-last"), *reads], key=lambda e: e["t"])


def test_your_read_that_found_no_file_is_missing_naming_the_file_and_your_frame():
    events = run(read(10, 1, exists=False), ev(13, 1, "file_state", path=PATH, by=MINE, **FINAL))
    assert outcome(1, events) == "missing" and outcome(0, events) == "loaded"
    verdict = judge_load_best(events, 2)
    assert verdict.verdict == "race"
    assert ("rank 1 tried to load (your code's read of models/weights.pt, read in mine/own_file.py:20, found no "
            "file)") in verdict.explanation


def test_your_read_of_a_file_written_again_after_it_is_stale():
    events = run(read(10, 1, exists=True, bytes=16441, inode=7, mtime_ns=1_000),
                 ev(13, 1, "file_state", path=PATH, by=MINE, **FINAL))
    assert outcome(1, events) == "stale"
    assert "came before its last write" in judge_load_best(events, 2).explanation


def test_the_last_read_decides_a_read_of_the_file_as_it_ended_is_fine_and_others_reads_are_not_yours():
    retried = run(read(10, 1, exists=False), read(12.4, 1, **FINAL), ev(13, 1, "file_state", path=PATH, by=MINE,
                                                                          **FINAL))
    assert outcome(1, retried) == "loaded" and judge_load_best(retried, 2).verdict == "clean"
    framework_read = run(read(10, 1, by=None, exists=False))  # the adapter's own events judge it
    assert outcome(1, framework_read) == "loaded"


def raised(t, rank, error_type, message, by=MINE, at="/work/lib/torch/serialization.py:1500"):
    return ev(t, rank, "rank_error", error_type=error_type, message=message, at=at, **({"by": by} if by else {}))


def failed(rank, t=20):
    return ev(t, "launcher", "rank_failed", failed_rank=rank, exitcode=1, message="EOFError", log="logs/1.log")


def test_your_read_of_a_file_being_written_that_your_code_could_not_load_is_corrupt():
    events = run(read(10, 1, exists=True, bytes=900, inode=7, mtime_ns=1_000),
                 raised(10.1, 1, "EOFError", "Ran out of input"), ev(13, 1, "file_state", path=PATH, by=MINE, **FINAL))
    assert outcome(1, events) == "corrupt"
    verdict = judge_load_best(events, 2)
    assert verdict.verdict == "race"
    assert ("rank 1 read a partly written checkpoint (your code's read of models/weights.pt, read in "
            "mine/own_file.py:20, came while it was being written (900 bytes then, 16441 when the rank ended): your "
            "code raised EOFError: Ran out of input, in mine/own_file.py:20)") in verdict.explanation


def test_an_exception_your_code_raised_is_a_race_named_by_what_it_says_never_no_verdict():
    missing = run(raised(10.1, 1, "FileNotFoundError", "[Errno 2] No such file: 'weights.pt'"), failed(1))
    assert outcome(1, missing) == "missing"
    other = run(raised(10.1, 1, "KeyError", "'model'"), failed(1))
    assert outcome(1, other) == "raised"
    verdict = judge_load_best(other, 2)
    assert verdict.verdict == "race"
    assert "rank 1 failed in your code (your code raised KeyError: 'model', in mine/own_file.py:20)" in \
        verdict.explanation


def test_an_exception_that_never_passed_through_your_code_is_no_verdict_naming_where_it_was_raised():
    events = run(raised(10.1, 1, "RuntimeError", "gloo broke", by=None), failed(1))
    assert outcome(1, events) == "error"
    verdict = judge_load_best(events, 2)
    assert verdict.verdict == "error"
    assert "raised in torch/serialization.py:1500" in verdict.explanation


def test_a_read_followed_by_the_rank_s_own_save_is_part_of_that_save_and_one_before_or_at_its_start_is_still_judged():
    """A rank that read the file and then began a save of its own (a marker's digest of what it writes) leaves
    what it ends with to later reads; a save that began before the read, or at its very moment, does not excuse it."""
    from train.judge.own_reads import own_read

    def mine(save_at):
        return [ev(save_at, 1, "save_start", epoch=0, path=PATH),
                read(10, 1, exists=True, bytes=16441, inode=7, mtime_ns=1_000),
                ev(13, 1, "file_state", path=PATH, by=MINE, **FINAL)]

    assert own_read(sorted(mine(11), key=lambda e: e["t"])) is None
    stale = ("stale", "your code's read of models/weights.pt, read in mine/own_file.py:20, came before its last write "
                      "(16441 bytes then, 16441 when the rank ended)")
    assert own_read(mine(9)) == stale and own_read(mine(10)) == stale


def test_a_path_is_named_by_its_folder_and_file_and_a_folder_by_its_parent_and_itself():
    from train.judge.own_reads import short_path

    assert short_path("/runs/x/models/weights.pt") == "models/weights.pt"
    assert short_path("/runs/x/models/") == "x/models"
    assert short_path("/ckpt/resnet50_MAX/") == "ckpt/resnet50_MAX"
