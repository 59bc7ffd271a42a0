"""The load at the end judged from hand-made events (workload=load_best): each rank's outcome and detail, its
timings, the verdict and its sentence (train/judge/load_best.py, explain.py, vocabulary.py). No ranks."""
import pytest

from helpers.judge_events import T0, ev, launch, loader, outcome, saver
from train.judge.explain import replicas
from train.judge.load_best import classify_rank, decide, rank_timings
from train.judge.verdict import judge
from train.judge.vocabulary import (OUTCOMES, VERDICTS, RankOutcome, Verdict, classify_load_error, is_corrupt_read,
                                    saves, secs, short, span, worst_status)


def test_loaded_when_the_digest_matches_the_last_save():
    events = launch("ok", *saver(), *loader(1, 12.5, digest="w-last"))
    assert outcome(1, events) == "loaded"
    assert outcome(0, events) == "loaded"


def test_missing_when_the_file_was_not_there():
    events = launch("ok", *saver(), *loader(1, 9.0, error_type="FileNotFoundError", message="No such file"))
    assert outcome(1, events) == "missing"


def test_stale_when_it_loaded_an_earlier_save():
    events = launch("ok", *saver(("w-epoch0", "w-epoch1", "w-last")), *loader(1, 9.5, digest="w-epoch1"))
    result = classify_rank(1, events)
    assert result.outcome == "stale"
    assert "epoch-1" in result.detail


def test_stale_when_it_loaded_a_file_this_run_never_wrote():
    events = launch("ok", *saver(), *loader(1, 9.0, digest="left-by-an-earlier-run"))
    assert outcome(1, events) == "stale"


def test_corrupt_when_it_read_a_partial_file():
    msg = "PytorchStreamReader failed reading zip archive: failed finding central directory"
    events = launch("ok", *saver(), *loader(1, 11.9, error_type="RuntimeError", message=msg))
    assert outcome(1, events) == "corrupt"
    assert classify_load_error("UnpicklingError", "invalid load key") == "corrupt"
    assert classify_load_error("EOFError", "Ran out of input") == "corrupt"  # an empty file
    assert classify_load_error("OSError", "[Errno 22] Invalid argument") == "corrupt"  # half a file
    for cut in ("header too small", "invalid header length", "incomplete metadata, file not fully covered"):
        assert classify_load_error("SafetensorError", f"Error while deserializing header: {cut}") == "corrupt"


def test_corrupt_when_rank_0_sent_the_error_of_a_partial_safetensors_file():
    """broadcast: rank 1 read no file (no bytes), it got rank 0's error (accelerate's model.safetensors, half written)."""
    msg = "Error while deserializing header: incomplete metadata, file not fully covered"
    events = launch("ok", *saver(), ev(11.0, 1, "load_attempt", source="broadcast from rank 0"),
                    ev(11.01, 1, "load_error", error_type="SafetensorError", message=msg))
    assert outcome(1, events) == "corrupt"


def test_corrupt_when_the_file_it_read_was_shorter_than_the_finished_save():
    events = launch("ok", *saver(), ev(11.0, 1, "load_attempt", bytes=900),
                    ev(11.01, 1, "load_error", error_type="OSError", message="[Errno 22] Invalid argument"))
    assert outcome(1, events) == "corrupt"


def test_unsafe_when_weights_only_refused_the_file():
    msg = "Weights only load failed. This file can still be loaded, to do so you have two options"
    events = launch("ok", *saver(), *loader(1, 9.0, error_type="UnpicklingError", message=msg))
    assert outcome(1, events) == "unsafe"
    verdict = judge(events, 2)
    assert verdict.verdict == "race"
    assert "rank 1 refused a checkpoint that holds code (weights_only=True)" in verdict.explanation


def test_other_load_errors_are_errors():
    events = launch("ok", *saver(), *loader(1, 12.5, error_type="RuntimeError", message="size mismatch"))
    assert outcome(1, events) == "error"


def test_timeout_when_the_barrier_timed_out():
    events = launch("ok", *saver(end=40), ev(9, 1, "sync_enter", how="barrier"),
                    ev(14, 1, "sync_error", how="barrier", error_type="DistBackendError", message="Timed out",
                       timed_out=True), ev(14.1, 1, "rank_end"))
    result = classify_rank(1, events)
    assert result.outcome == "timeout"
    assert result.timings["wait"] == 5.0
    assert judge(events, 2).verdict == "race"


def test_the_wait_is_the_last_sync_s_when_a_rank_synced_before():
    """A framework with several waits (Lightning: its "new best?" decision, then the barrier after the save): the
    wait is the last one's, from its sync_enter to its sync_exit or sync_error, whichever came last."""
    events = launch("ok", *saver(end=40), ev(8, 1, "sync_enter", how="reduce_boolean_decision"),
                    ev(9, 1, "sync_exit", how="reduce_boolean_decision"), ev(9.5, 1, "sync_enter", how="barrier"),
                    ev(24.5, 1, "sync_error", how="barrier", error_type="RuntimeError", message="Timed out",
                       timed_out=True), ev(24.6, 1, "rank_end"))
    result = classify_rank(1, events)
    assert (result.outcome, result.timings["wait"]) == ("timeout", 15.0)
    assert "rank 1 timed out after 15.0 s" in judge(events, 2).explanation


def test_a_timeout_names_the_ranks_that_never_came_to_the_sync():
    starts = [ev(1, r, "rank_start") for r in range(3)]
    events = launch("ok", *starts, ev(4.9, 0, "save_start", epoch=2),
                    ev(5, 0, "save_end", epoch=2, digest="w", bytes=1800), ev(5.5, 0, "sync_enter", how="barrier"),
                    ev(13.5, 0, "sync_error", how="barrier", error_type="DistBackendError",
                       message="[..] Timed out waiting 8000ms", timed_out=True),
                    ev(5.1, 1, "skip", reason="no checkpoint file when it looked (checkpoint.guard=sync)"),
                    ev(5.1, 2, "skip", reason="no checkpoint file when it looked (checkpoint.guard=sync)"))
    result = classify_rank(0, events)
    assert (result.outcome, result.detail) == ("timeout", "barrier: waited for ranks 1, 2, which never came")
    assert outcome(1, events) == outcome(2, events) == "skipped"
    assert "ranks 1, 2 skipped the load (no checkpoint file when it looked" in judge(events, 3).explanation
    assert judge(events, 3).verdict == "race"


def test_a_rank_that_comes_after_its_peer_stopped_waiting_is_aborted():
    events = launch("ok", ev(1, 1, "sync_enter", how="barrier"),
                    ev(4, 1, "sync_error", how="barrier", error_type="RuntimeError", message="Timed out", timed_out=True),
                    ev(15, 0, "sync_enter", how="barrier"),
                    ev(15.1, 0, "sync_error", how="barrier", error_type="RuntimeError",
                       message="[../gloo/transport/tcp/pair.cc:561] Connection closed by peer", timed_out=False))
    result = classify_rank(0, events)
    assert (result.outcome, result.detail) == ("aborted", "its barrier broke: rank 1 had stopped waiting")
    assert judge(events, 2).verdict == "race"


def test_timeout_when_the_launcher_stopped_the_run_at_run_s():
    events = launch("timeout", ev(1, 1, "rank_start"), ev(9, 1, "sync_enter", how="barrier"))
    assert outcome(1, events) == "timeout"
    assert judge(events, 2).verdict == "race"


def test_a_crash_placed_by_the_scenario_is_crashed_and_its_peers_aborted():
    events = launch("failed", ev(1, 0, "rank_start"), ev(1, 1, "rank_start"), ev(9, 0, "crash"),
                    ev(9.1, "launcher", "rank_failed", failed_rank=0, exitcode=1, message="exit code 1"),
                    ev(9, 1, "sync_enter", how="barrier"))
    assert outcome(0, events) == "crashed"
    assert outcome(1, events) == "aborted"
    assert judge(events, 2).verdict == "race"


def test_a_rank_that_failed_on_its_own_is_an_error_not_a_race_and_points_to_its_log():
    events = launch("failed", ev(1, 0, "rank_start"), ev(1, 1, "rank_start"),
                    ev(3, "launcher", "rank_failed", failed_rank=1, exitcode=1,
                       message="ZeroDivisionError: division by zero", log="logs/x/attempt_0/1/stderr.log"))
    verdict = judge(events, 2)
    assert [r.outcome for r in verdict.ranks] == ["aborted", "error"]
    assert verdict.verdict == "error"
    assert verdict.explanation == ("error: rank 1 failed (ZeroDivisionError: division by zero; traceback in "
                                   "logs/x/attempt_0/1/stderr.log)")
    assert verdict.ranks[1].log == "logs/x/attempt_0/1/stderr.log"


def test_a_launch_that_failed_is_an_error_with_its_reason():
    events = launch("harness_error", ev(0.5, "launcher", "launch_error", error_type="RendezvousConnectionError",
                                        message="The connection to the C10d store has failed"))
    verdict = judge(events, 2)
    assert verdict.verdict == "error"
    assert verdict.explanation == ("error: the launch failed (RendezvousConnectionError: The connection to the "
                                   "C10d store has failed)")


def test_an_interrupted_run_has_no_race_verdict():
    events = launch("interrupted", ev(1, 0, "rank_start"), ev(1, 1, "rank_start"),
                    ev(4, "launcher", "signal", name="SIGTERM"))
    verdict = judge(events, 2)
    assert verdict.verdict == "interrupted"
    assert verdict.explanation == "interrupted: the run was stopped by SIGTERM before it ended; no verdict"


def test_error_when_a_rank_ended_without_loading():
    events = launch("ok", *saver(), ev(1, 1, "rank_start"), ev(20, 1, "rank_end"))
    assert outcome(1, events) == "error"


def test_ranks_that_skipped_keep_their_own_weights_and_the_replicas_diverge():
    events = launch("ok", *saver(("w-epoch0",), end=12), ev(9, 1, "skip", reason="no checkpoint file when it looked"),
                    ev(9.1, 1, "final", digest="w-trained"))
    verdict = judge(events, 2)
    assert [r.outcome for r in verdict.ranks] == ["loaded", "skipped"]
    assert (verdict.verdict, verdict.replicas) == ("race", "diverged")
    assert verdict.explanation.endswith("the replicas diverged: rank 0 vs rank 1 end with different weights")


def test_a_failed_save_that_every_rank_agreed_on_is_save_failed():
    skip = "rank 0's save failed: every rank agreed not to load"
    events = launch("ok", ev(5, 0, "save_start"), ev(5.1, 0, "save_error", error_type="OSError",
                                                      message="[Errno 28] No space left on device"),
                    *[e for r in (0, 1) for e in (ev(5.2, r, "skip", reason=skip), ev(5.3, r, "final", digest="w"))])
    verdict = judge(events, 2)
    assert verdict.verdict == "save_failed"
    assert verdict.explanation == ("save_failed: rank 0's save failed (OSError: [Errno 28] No space left on "
                                   "device); every rank says so and none loaded, so all hold the same weights")
    diverged = [e if e["event"] != "final" or e["rank"] != 1 else {**e, "digest": "other"} for e in events]
    assert judge(diverged, 2).verdict == "race"
    # rank 1 skipped because it saw no file: the same weights, but it never knew the save failed
    unaware = [e if e["event"] != "skip" or e["rank"] != 1 else {**e, "reason": "no checkpoint file when it looked"}
               for e in events]
    verdict = judge(unaware, 2)
    assert verdict.verdict == "race"
    assert verdict.explanation.endswith("rank 1 never said the save failed")


def test_a_run_in_which_a_save_failed_is_never_clean_even_when_every_rank_loaded():
    """Rank 0's last save failed and left the earlier file whole (an atomic write); both ranks read that file
    after the failure. Both hold the same weights, yet rank 1 never learned that the save failed."""
    events = launch("ok", *saver(("w-epoch0",), end=5.0)[:2], ev(8, 0, "save_start", epoch=1),
                    ev(8.1, 0, "save_error", error_type="OSError", message="[Errno 28] No space left on device"),
                    *loader(0, 8.5, digest="w-epoch0"), *loader(1, 9.0, digest="w-epoch0"))
    verdict = judge(events, 2)
    assert [r.outcome for r in verdict.ranks] == ["loaded", "loaded"]
    assert verdict.verdict == "race"
    assert verdict.explanation == (
        "race: rank 0's save failed (OSError: [Errno 28] No space left on device); ranks 0, 1 loaded the last "
        "checkpoint that finished (epoch 0); rank 1 never said the save failed")


def test_a_rank_that_read_before_the_last_save_began_read_a_stale_checkpoint_even_when_that_save_failed():
    """accelerate, scenario=save_fails, fix=atomic: rank 1 found epoch 1's file and read it while rank 0 was still
    late before its last save; that save (epoch 2) then failed, and rank 0 read epoch 1's file after it."""
    events = launch("ok", *saver(("w-epoch0", "w-epoch1"), end=5.0)[:4],
                    *loader(1, 6.0, digest="w-epoch1"), ev(7.0, 0, "save_start", epoch=2),
                    ev(7.01, 0, "save_error", epoch=2, error_type="OSError", message="[Errno 28] No space left on device"),
                    *loader(0, 7.05, digest="w-epoch1"))
    verdict = judge(events, 2)
    assert [(r.outcome, r.detail) for r in verdict.ranks] == [
        ("loaded", ""),
        ("stale", "loaded the epoch-1 save, read 1.0 s before rank 0's save of epoch 2 began; that save then failed")]
    assert verdict.verdict == "race"
    assert verdict.explanation == (
        "race: rank 0's save failed (OSError: [Errno 28] No space left on device); rank 0 loaded the last checkpoint "
        "that finished (epoch 1); rank 1 loaded an older checkpoint (the epoch-1 save, read 1.0 s before rank 0's "
        "save of epoch 2 began; that save then failed)")
    # read after the last save began: not stale by its time (what it read is judged by its weights)
    assert outcome(1, [e if e["rank"] != 1 else {**e, "t": e["t"] + 1.5} for e in events]) == "loaded"
    # the last save that began ended too: a read before it that got the file it then wrote cannot be; a read of
    # the earlier file is stale by its weights, as before
    finished = [e if e["event"] != "save_error" else {**e, "event": "save_end", "digest": "w-epoch2", "bytes": 1800}
                for e in events]
    assert classify_rank(1, finished).detail == "loaded the epoch-1 save"


def test_a_rank_that_failed_after_its_load_is_never_loaded_and_the_run_never_clean():
    """Lightning's validate after the load timed out on a send (the adapter records train_error), a sync after the
    load failed or could never end, or the rank died after its load (the launcher's rank_failed)."""
    base = launch("ok", *saver(), *loader(1, 12.5, digest="w-last"))
    assert judge(base, 2).verdict == "clean"

    def after(*extra, status="ok"):
        return judge([e for e in base if e["event"] != "launch_end"] + [*extra, ev(30, "launcher", "launch_end",
                                                                                   status=status)], 2)
    timed_out = after(ev(12.6, 0, "sync_enter", how="barrier"), ev(12.7, 0, "sync_exit", how="barrier"),
                      ev(13, 0, "train_error", what="trainer.validate", error_type="RuntimeError", timed_out=True,
                         message="[../gloo/transport/tcp/pair.cc:534] Timed out waiting 10000ms for send operation"))
    assert [(r.outcome, r.detail) for r in timed_out.ranks] == [
        ("timeout", "after its load, trainer.validate: RuntimeError: Timed out waiting 10000ms for send operation"),
        ("loaded", "")]
    assert timed_out.verdict == "race"
    assert timed_out.explanation == ("race: rank 0 timed out (after its load, trainer.validate: RuntimeError: Timed "
                                     "out waiting 10000ms for send operation)")  # no wait of a sync of its own

    closed = after(ev(13, 0, "train_error", what="trainer.validate", error_type="RuntimeError", timed_out=False,
                      message="Application timeout caused pair closure"))  # gloo's other words for a timeout
    assert closed.ranks[0].outcome == "timeout" and closed.verdict == "race"

    raised = after(ev(13, 1, "train_error", what="trainer.validate", error_type="RuntimeError", timed_out=False,
                      message="boom"))
    assert (raised.verdict, raised.ranks[1].outcome) == ("error", "error")
    assert raised.explanation == "error: rank 1 failed (after its load, trainer.validate: RuntimeError: boom)"

    died = after(ev(14, "launcher", "rank_failed", failed_rank=1, exitcode=1, message="ValueError: x",
                    log="logs/rank1.log"), status="failed")
    assert (died.verdict, died.ranks[1].outcome, died.ranks[1].log) == ("error", "error", "logs/rank1.log")
    assert died.explanation == "error: rank 1 failed (after its load, it died (ValueError: x); traceback in logs/rank1.log)"

    barrier = after(ev(13, 1, "sync_enter", how="barrier"), barrier_error(23, 1, timed_out=True))
    assert (barrier.verdict, barrier.ranks[1].outcome) == ("race", "timeout")
    assert barrier.ranks[1].detail == "after its load, barrier: timed out"
    hung = after(ev(13, 1, "sync_enter", how="barrier"),
                 ev(14, 1, "hang", sync="barrier", waiting_for=[0], peers={"0": {"at": "end"}}))
    assert (hung.verdict, hung.ranks[1].outcome) == ("race", "hung")
    assert hung.ranks[1].detail.startswith("after its load, its barrier could never end: rank 0 went on to the end")

    before = after(ev(12.4, 1, "train_error", what="trainer.fit", error_type="RuntimeError", timed_out=False,
                      message="boom"))  # before its load: not what is judged here
    assert before.ranks[1].outcome == "loaded"

    stale = launch("ok", *saver(("w-epoch0", "w-last")), *loader(1, 9.5, digest="w-epoch0"),
                   ev(13, 1, "train_error", what="trainer.validate", error_type="RuntimeError", timed_out=False,
                      message="boom"))
    said = "loaded the epoch-0 save; after its load, trainer.validate: RuntimeError: boom"
    assert detail(1, stale) == ("stale", said)  # the wrong read stays the news


def test_a_stale_read_is_timed_from_when_the_rank_began_reading_to_when_the_first_rank_began_the_last_save():
    """DCP: every rank writes the save of epoch 3; rank 1 began its slow read (0.6 s) of epoch 2's file before
    either began, and rank 0's write failed 2 s into it."""
    events = launch("ok", *saver(("w-epoch0", "w-epoch1", "w-epoch2"), end=5.0)[:6],
                    ev(6.0, 1, "load_attempt"), ev(6.6, 1, "load_done", digest="w-epoch2"),
                    ev(7.0, 0, "save_start", epoch=3), ev(7.4, 2, "save_start", epoch=3),
                    ev(9.0, 0, "save_error", epoch=3, error_type="OSError", message="[Errno 28] No space left"))
    assert detail(1, events) == (
        "stale", "loaded the epoch-2 save, read 1.0 s before rank 0's save of epoch 3 began; that save then failed")


def test_a_read_before_a_last_save_that_never_ended_says_that_save_never_finished():
    """Rank 0 was killed while it wrote the save of epoch 2: no save_end, no save_error."""
    events = launch("failed", *saver(("w-epoch0", "w-epoch1"), end=5.0)[:4], *loader(1, 6.0, digest="w-epoch1"),
                    ev(7.0, 0, "save_start", epoch=2))
    assert detail(1, events) == (
        "stale", "loaded the epoch-1 save, read 1.0 s before rank 0's save of epoch 2 began; that save then never "
                 "finished")


def test_a_rank_whose_sync_raised_after_its_load_and_then_died_of_it_failed_of_its_own_error():
    """Its own death is not a peer's: the launcher's rank_failed for the rank itself breaks none of its syncs."""
    events = launch("failed", *saver(), *loader(1, 12.5, digest="w-last"),
                    ev(13, 1, "sync_error", how="barrier", error_type="RuntimeError", message="boom", timed_out=False),
                    ev(13.2, 1, "train_error", what="trainer.validate", error_type="RuntimeError", message="later"),
                    ev(14, "launcher", "rank_failed", failed_rank=1, exitcode=1, message="RuntimeError: boom"))
    assert detail(1, events) == ("error", "after its load, barrier: RuntimeError: boom")


def test_a_rank_that_died_after_its_load_without_a_message_is_said_by_its_exit_code():
    events = launch("failed", *saver(), *loader(1, 12.5, digest="w-last"),
                    ev(14, "launcher", "rank_failed", failed_rank=1, exitcode=-9))
    assert detail(1, events) == ("error", "after its load, it died (exit code -9)")


def test_a_rank_names_a_log_only_where_the_launcher_recorded_its_traceback():
    died = ev(14, "launcher", "rank_failed", failed_rank=1, exitcode=-9)
    quiet = launch("failed", *saver(), *loader(1, 12.5, digest="w-last"), died)
    assert classify_rank(1, quiet).log == ""
    hung = launch("ok", *saver(), *loader(1, 12.5, digest="w-last"), ev(13, 1, "sync_enter", how="barrier"),
                  ev(14, 1, "hang", sync="barrier", waiting_for=[0], peers={"0": {"at": "end"}}))
    assert classify_rank(1, hung).log == ""
    stale = launch("failed", *saver(("w-epoch0", "w-last")), *loader(1, 9.5, digest="w-epoch0"),
                   {**died, "log": "logs/rank1.log"})
    assert (classify_rank(1, stale).outcome, classify_rank(1, stale).log) == ("stale", "logs/rank1.log")


def test_replicas_unknown_when_a_rank_never_recorded_its_final_weights():
    events = launch("ok", *saver(), ev(1, 1, "rank_start"))
    assert replicas([classify_rank(r, events) for r in (0, 1)]) == "unknown"


def test_verdict_clean_only_when_every_rank_loaded():
    clean = launch("ok", *saver(), *loader(1, 12.01, digest="w-last"), *loader(2, 12.02, digest="w-last"))
    verdict = judge(clean, 3)
    assert verdict.verdict == "clean"
    assert verdict.explanation.startswith("clean: every rank loaded the last checkpoint rank 0 wrote")

    one_missing = launch("ok", *saver(), *loader(1, 12.01, digest="w-last"),
                         *loader(2, 9.1, error_type="FileNotFoundError", message="No such file"))
    assert judge(one_missing, 3).verdict == "race"


def test_race_explanation_names_the_ranks_the_lead_and_the_error():
    events = launch("ok", *saver(end=12.0),  # the others' own weights happen to equal the last save's
                    *loader(1, 9.1, error_type="FileNotFoundError", message="x", final="w-last"),
                    *loader(2, 9.1, error_type="FileNotFoundError", message="x", final="w-last"))
    verdict = judge(events, 3)
    assert verdict.explanation == \
        "race: ranks 1, 2 tried to load 2.9 s before rank 0 finished saving (FileNotFoundError)"
    assert [r.outcome for r in verdict.ranks] == ["loaded", "missing", "missing"]
    assert verdict.ranks[1].timings["load_after_save_end"] == -2.9


def test_a_barrier_broken_by_an_interrupt_is_aborted_not_an_error():
    broke = ev(9.5, 1, "sync_error", how="barrier", error_type="RuntimeError", message="Connection reset by peer",
               timed_out=False)
    assert outcome(1, launch("interrupted", ev(9, 1, "sync_enter", how="barrier"), broke)) == "aborted"
    assert outcome(1, launch("ok", ev(9, 1, "sync_enter", how="barrier"), broke)) == "error"


def test_a_clean_explanation_names_the_trap_that_the_fix_avoided():
    late = [ev(2, 0, "skew_start", seconds=3.0), ev(5, 0, "skew_end")]
    waited = [ev(1.5, 1, "sync_enter", how="barrier"), ev(12.005, 1, "sync_exit", how="barrier")]
    events = launch("ok", *late, *saver(), *waited, *loader(1, 12.01, digest="w-last"))
    assert judge(events, 2).explanation == (
        "clean: every rank loaded the last checkpoint rank 0 wrote; rank 1 started loading 0.01 s after the save "
        "ended. The trap it avoided: rank 0 was 3.0 s late at its last save; rank 1 waited 10.5 s at the barrier")

    torn = [ev(11, 0, "skew_start", seconds=3.0, at="mid_write"), ev(11.9, 0, "skew_end")]
    older = saver(digests=("w-old", "w-last"))
    assert "rank 0 stalled 3.0 s halfway through writing the checkpoint, so it existed half-written; an older " \
        "checkpoint (epoch 0) was there to read" in judge(launch("ok", *torn, *older, *loader(1, 12.5, digest="w-last")),
                                                         2).explanation


def test_a_stall_that_ended_once_every_peer_was_settled_says_how_long_it_lasted():
    late = [ev(2, 0, "skew_start", seconds=3.0), ev(2.4, 0, "skew_end", settled=True)]
    waited = [ev(1.5, 1, "sync_enter", how="barrier"), ev(12.005, 1, "sync_exit", how="barrier")]
    events = launch("ok", *late, *saver(), *waited, *loader(1, 12.01, digest="w-last"))
    assert "The trap it avoided: rank 0 was late at its last save: it stalled 0.40 s of its 3.0 s, until every " \
        "other rank was past its load or waiting for it; rank 1 waited" in judge(events, 2).explanation

    torn = [ev(11, 0, "skew_start", seconds=3.0, at="mid_write"), ev(11.5, 0, "skew_end", settled=True)]
    older = saver(digests=("w-old", "w-last"))
    assert "rank 0 stalled 0.50 s of its 3.0 s halfway through writing the checkpoint, so it existed half-written " \
        "(by then every other rank was past its load or waiting for it)" in \
        judge(launch("ok", *torn, *older, *loader(1, 12.5, digest="w-last")), 2).explanation


def test_a_rank_that_finds_no_file_on_its_own_node_is_told_where_the_file_is():
    nodes = [ev(0.1, 0, "rank_start", node=0), ev(0.1, 1, "rank_start", node=1),
             ev(1, 0, "fit_start", node_local=True), ev(1, 1, "fit_start", node_local=True)]
    events = launch("ok", *nodes, *saver(end=12.0),
                    *loader(1, 12.05, error_type="FileNotFoundError", message="No such file"))
    assert judge(events, 2).explanation.startswith(
        "race: rank 1 tried to load (FileNotFoundError): the file is on node 0's own disk; node 1's disk has none")

    shared = [{**e, "node_local": False} if e["event"] == "fit_start" else e for e in events]
    assert "own disk" not in judge(shared, 2).explanation  # a shared filesystem: no such claim


def test_a_missing_file_that_the_framework_only_warned_about_says_so():
    events = launch("ok", *saver(end=12.0), *loader(1, 12.05, error_type="FileNotFoundError",
                                                     message="the Trainer only warned and kept its training weights "
                                                             "(\"Could not locate the best model at x\")"))
    verdict = judge(events, 2)
    assert [r.outcome for r in verdict.ranks] == ["loaded", "missing"]
    assert verdict.explanation.startswith("race: rank 1 tried to load (FileNotFoundError: the Trainer only warned and "
                                          "kept its training weights); the replicas diverged")


# --- every branch of the classification, its outcome and its detail ---------------------------------------

def detail(rank, events):
    found = classify_rank(rank, events)
    return found.outcome, found.detail


def barrier_error(t, rank, timed_out, message="Connection closed by peer", how="barrier"):
    return ev(t, rank, "sync_error", how=how, error_type="RuntimeError", message=message, timed_out=timed_out)


def test_stale_details_name_the_save_or_say_this_run_never_wrote_it():
    events = launch("ok", *saver(("w-epoch0", "w-epoch1", "w-last")), *loader(1, 9.5, digest="w-epoch1"))
    assert detail(1, events) == ("stale", "loaded the epoch-1 save")
    events = launch("ok", *saver(), *loader(1, 9.0, digest="left-by-an-earlier-run"))
    assert detail(1, events) == ("stale", "loaded a file this run never wrote")
    nothing_saved = launch("ok", *loader(1, 9.0, digest="left-by-an-earlier-run"))
    assert detail(1, nothing_saved) == ("stale", "loaded a file this run never wrote")


def test_a_failed_load_says_its_error_type_and_the_gist_of_its_message():
    events = launch("ok", *saver(), *loader(1, 9.0, error_type="FileNotFoundError",
                                            message="[Errno 2] No such file or directory. Twice"))
    assert detail(1, events) == ("missing", "FileNotFoundError: [Errno 2] No such file or directory")


@pytest.mark.parametrize("seen, expected", [(1799, "corrupt"), (1800, "error"), (None, "error")])
def test_an_unknown_load_error_on_a_file_shorter_than_the_last_save_is_corrupt(seen, expected):
    events = launch("ok", *saver(), ev(11.0, 1, "load_attempt", bytes=seen),
                    ev(11.01, 1, "load_error", error_type="RuntimeError", message="size mismatch"))
    assert outcome(1, events) == expected
    unsized = launch("ok", ev(4.9, 0, "save_start"), ev(5, 0, "save_end", digest="w"),  # a save of unknown size
                     ev(11.0, 1, "load_attempt", bytes=0), ev(11.01, 1, "load_error", error_type="E", message="m"))
    assert outcome(1, unsized) == "error"
    no_save = launch("ok", ev(11.0, 1, "load_attempt", bytes=seen),
                     ev(11.01, 1, "load_error", error_type="RuntimeError", message="size mismatch"))
    assert outcome(1, no_save) == "error"
    missing = launch("ok", *saver(), ev(11.0, 1, "load_attempt", bytes=seen),
                     ev(11.01, 1, "load_error", error_type="FileNotFoundError", message="No such file"))
    assert outcome(1, missing) == "missing"  # only an unexplained error is put down to a short file


def test_a_timed_out_wait_for_the_file_says_whether_the_save_failed():
    wait = [ev(9, 1, "sync_enter", how="file"), barrier_error(19, 1, True, "no best.pth after 10 s", how="file")]
    assert detail(1, launch("ok", *wait)) == ("timeout", "no checkpoint appeared within its wait")
    failed = ev(5, 0, "save_error", error_type="OSError", message="[Errno 28] No space left on device")
    assert detail(1, launch("ok", failed, *wait)) == \
        ("timeout", "no checkpoint appeared within its wait (rank 0's save failed: OSError)")


def test_a_timed_out_sync_names_who_never_came_or_says_it_timed_out():
    starts = [ev(1, r, "rank_start") for r in range(3)]
    entered = [ev(5, r, "sync_enter", how="barrier") for r in range(3)]
    events = launch("ok", *starts, *entered, barrier_error(13, 0, True, "Timed out"))
    assert detail(0, events) == ("timeout", "barrier: timed out")  # everyone came: no one to name
    other_kind = [ev(5, 1, "sync_enter", how="agree")]  # rank 1 came to another kind of sync
    events = launch("ok", *starts, ev(5, 0, "sync_enter", how="barrier"), *other_kind,
                    barrier_error(13, 0, True, "Timed out"))
    assert detail(0, events) == ("timeout", "barrier: waited for ranks 1, 2, which never came")
    unnamed = launch("ok", *starts, ev(13, 0, "sync_error", error_type="RuntimeError", message="x", timed_out=True))
    assert detail(0, unnamed) == ("timeout", "sync: waited for ranks 1, 2, which never came")


def test_a_sync_broken_by_a_peers_death_is_aborted_and_names_the_peer():
    events = launch("failed", ev(9, 1, "sync_enter", how="barrier"), barrier_error(9.5, 1, False),
                    ev(9.4, "launcher", "rank_failed", failed_rank=0, exitcode=1, message="killed by SIGKILL"),
                    ev(9.4, "launcher", "rank_failed", failed_rank=1, exitcode=1, message="killed by SIGKILL"))
    assert detail(1, events) == ("aborted", "its barrier broke when rank 0 died")
    alone = launch("failed", ev(9, 1, "sync_enter", how="barrier"), barrier_error(9.5, 1, False, "boom"),
                   ev(9.4, "launcher", "rank_failed", failed_rank=1, exitcode=1, message="killed"))
    assert detail(1, alone) == ("error", "barrier: RuntimeError: boom")  # its own death is no peer's
    unnamed = launch("interrupted", ev(13, 1, "sync_error", error_type="RuntimeError", message="x", timed_out=False))
    assert detail(1, unnamed) == ("aborted", "its sync broke when the run was interrupted")
    assert detail(1, launch("interrupted", ev(9, 1, "sync_enter", how="broadcast"),
                            barrier_error(9.5, 1, False, how="broadcast"))) == \
        ("aborted", "its broadcast broke when the run was interrupted")
    peers_died = launch("failed", ev(13, 1, "sync_error", error_type="RuntimeError", message="x", timed_out=False),
                        ev(12, "launcher", "rank_failed", failed_rank=0, exitcode=1, message="m"),
                        ev(12, "launcher", "rank_failed", failed_rank=2, exitcode=1, message="m"))
    assert detail(1, peers_died) == ("aborted", "its sync broke when ranks 0, 2 died")


def test_a_late_sync_is_aborted_only_by_peers_that_had_already_given_up():
    mine = [ev(15, 0, "sync_enter", how="barrier"), barrier_error(15.1, 0, False, "[../gloo/pair.cc:561] Closed")]
    before = launch("ok", barrier_error(4, 1, True, "Timed out"), *mine)
    assert detail(0, before) == ("aborted", "its barrier broke: rank 1 had stopped waiting")
    same_time = launch("ok", barrier_error(15.1, 1, True, "Timed out"), *mine)
    assert detail(0, same_time)[0] == "aborted"
    after = launch("ok", barrier_error(16, 1, True, "Timed out"), *mine)
    assert detail(0, after) == ("error", "barrier: RuntimeError: Closed")
    not_timed_out = launch("ok", barrier_error(4, 1, False, "Closed"), *mine)
    assert detail(0, not_timed_out)[0] == "error"
    unnamed = launch("ok", barrier_error(4, 1, True, "Timed out"),
                     ev(15.1, 0, "sync_error", error_type="RuntimeError", message="x", timed_out=False))
    assert detail(0, unnamed) == ("aborted", "its sync broke: rank 1 had stopped waiting")
    assert detail(0, launch("ok", ev(15.1, 0, "sync_error", error_type="E", message="x", timed_out=False))) == \
        ("error", "sync: E: x")


def test_skipped_crashed_and_died_ranks_say_why():
    assert detail(1, launch("ok", ev(9, 1, "skip", reason="no file"))) == ("skipped", "no file")
    assert detail(0, launch("failed", ev(9, 0, "crash"))) == \
        ("crashed", "it died where the scenario placed a crash (fault.crash_rank)")
    died = [ev(3, "launcher", "rank_failed", failed_rank=1, exitcode=1, message="first", log="a.log"),
            ev(3.5, "launcher", "rank_failed", failed_rank=1, exitcode=2, message="", log="c.log"),
            ev(4, "launcher", "rank_failed", failed_rank=1, exitcode=-9, message="", log="b.log")]
    found = classify_rank(1, launch("failed", *died))
    assert (found.outcome, found.detail, found.log) == ("error", "exit code -9", "b.log")  # the last one
    found = classify_rank(1, launch("failed", died[2], died[0]))
    assert (found.outcome, found.detail, found.log) == ("error", "first", "a.log")
    no_log = ev(4, "launcher", "rank_failed", failed_rank=1, exitcode=1, message="m")
    assert classify_rank(1, launch("failed", no_log)).log == ""
    assert classify_rank(1, launch("ok", *saver(), *loader(1, 12.5, digest="w-last"))).log == ""


@pytest.mark.parametrize("status, expected", [
    ("timeout", ("timeout", "stopped by the launcher at timeout.run_s")),
    ("failed", ("aborted", "stopped by the launcher after a peer failed")),
    ("interrupted", ("aborted", "stopped by the launcher on interrupt")),
    ("harness_error", ("aborted", "stopped by the launcher")),
    ("ok", ("error", "ended without loading")),
])
def test_a_rank_that_recorded_no_result_is_judged_by_how_the_launch_ended(status, expected):
    assert detail(1, launch(status, ev(1, 1, "rank_start"))) == expected
    if status != "timeout":  # it ended by itself: not stopped by the launcher
        assert detail(1, launch(status, ev(1, 1, "rank_start"), ev(9, 1, "rank_end"))) == \
            ("error", "ended without loading")
    never_launched = [ev(1, 1, "rank_start")]  # no launch_end: the launcher died too
    assert detail(1, never_launched) == ("aborted", "stopped by the launcher")


def test_the_worst_launcher_status_wins():
    assert worst_status(["ok", "failed"]) == "failed"
    assert worst_status(["timeout", "failed", "ok"]) == "timeout"
    assert worst_status(["harness_error", "timeout"]) == "harness_error"
    assert worst_status(["ok", "interrupted", "harness_error"]) == "interrupted"
    assert worst_status([]) is None


def test_timings_are_seconds_since_the_first_launch_start():
    events = [ev(0.5, "launcher", "launch_start"), ev(0, "launcher", "launch_start"),
              ev(4.9, 0, "save_start"), ev(5, 0, "save_end", digest="w", bytes=1),
              ev(2, 1, "fit_start"), ev(3.25, 1, "sync_enter", how="barrier"), ev(5.5, 1, "sync_exit", how="barrier"),
              ev(5.75, 1, "load_attempt"), ev(5.8, 1, "load_done", digest="w"), ev(6, 1, "final", digest="w"),
              ev(6.1, 1, "rank_end"), ev(6.2, 1, "load_attempt")]  # the last of each event counts
    mine = [e for e in events if e["rank"] == 1]
    assert rank_timings(mine, events) == {"fit_start": 2.0, "sync_enter": 3.25, "sync_exit": 5.5, "load_attempt": 6.2,
                                          "load_done": 5.8, "final": 6.0, "rank_end": 6.1, "wait": 2.25,
                                          "load_after_save_end": 1.2}
    no_launch = [e for e in events if e["rank"] != "launcher"]
    assert rank_timings(mine, no_launch)["fit_start"] == 0.0  # from the first event there is
    early = [ev(-1, 0, "rank_start"), *events]  # an event before the launch (another node's) does not move t0
    assert rank_timings(mine, early)["fit_start"] == 2.0
    precise = [ev(0, "launcher", "launch_start"), ev(1.23456, 1, "sync_enter"), ev(2.34567, 1, "sync_exit"),
               ev(0.11111, 0, "save_end", digest="w"), ev(3.45678, 1, "load_attempt")]
    assert rank_timings(precise[1:3] + precise[4:], precise) == {
        "sync_enter": 1.235, "sync_exit": 2.346, "load_attempt": 3.457, "wait": 1.111, "load_after_save_end": 3.346}
    failed = [ev(0, "launcher", "launch_start"), ev(3, 1, "sync_enter"), ev(7.5, 1, "sync_error")]
    assert rank_timings(failed[1:], failed) == {"sync_enter": 3.0, "sync_error": 7.5, "wait": 4.5}
    assert rank_timings(failed[2:], failed) == {"sync_error": 7.5}  # no enter: no wait
    both = failed + [ev(5, 1, "sync_exit")]
    assert rank_timings(both[1:], both)["wait"] == 2.0  # left at its exit, not its later error
    assert rank_timings([ev(3, 1, "load_attempt")], [ev(0, "launcher", "launch_start")]) == {"load_attempt": 3.0}


def test_the_verdict_of_a_run_whose_ranks_timed_out_is_race_never_clean():
    loaded = RankOutcome(0, "loaded", final_digest="w")
    timed_out = RankOutcome(1, "timeout", final_digest="w")
    assert decide([loaded, timed_out], [], "ok") == "race"
    assert decide([timed_out, RankOutcome(0, "timeout", final_digest="w")], [], "timeout") == "race"
    assert decide([loaded, RankOutcome(1, "loaded", final_digest="w")], [], "ok") == "clean"


def test_decide_puts_the_interrupt_first_then_the_harness_then_the_race():
    loaded = [RankOutcome(r, "loaded", final_digest="w") for r in (0, 1)]
    errored = [loaded[0], RankOutcome(1, "error", final_digest="w")]
    assert decide(errored, [], "interrupted") == "interrupted"
    assert decide(loaded, [], "interrupted") == "interrupted"
    assert decide(loaded, [], "harness_error") == "error"
    assert decide(errored, [], "failed") == "error"
    assert decide(loaded, [], "failed") == "clean"  # every rank holds the last checkpoint
    assert decide([], [], "ok") == "race"  # no rank at all holds nothing


def test_save_failed_needs_the_failed_save_every_rank_skipping_and_the_same_weights():
    failed = [ev(5, 0, "save_error", error_type="OSError", message="full"),
              *[ev(6, r, "skip", reason="rank 0's save failed: every rank agreed not to load") for r in (0, 1)]]
    skipped = [RankOutcome(r, "skipped", final_digest="w") for r in (0, 1)]
    assert decide(skipped, failed, "ok") == "save_failed"
    assert decide(skipped, [], "ok") == "race"  # skipped, but no save failed
    assert decide([skipped[0], RankOutcome(1, "skipped", final_digest="v")], failed, "ok") == "race"
    assert decide([skipped[0], RankOutcome(1, "timeout", final_digest="w")], failed, "ok") == "race"
    assert decide([skipped[0], RankOutcome(1, "skipped")], failed, "ok") == "race"  # weights unknown


def test_judge_classifies_world_size_ranks():
    events = launch("ok", *saver(), *loader(1, 12.5, digest="w-last"))
    verdict = judge(events, 3)
    assert [r.rank for r in verdict.ranks] == [0, 1, 2]
    assert [r.outcome for r in verdict.ranks] == ["loaded", "loaded", "error"]  # rank 2 recorded nothing
    assert (verdict.verdict, verdict.replicas) == ("error", "unknown")
    as_dict = verdict.as_dict()
    assert set(as_dict) == {"verdict", "explanation", "replicas", "ranks"}
    assert (as_dict["verdict"], as_dict["replicas"]) == ("error", "unknown")
    assert as_dict["explanation"] == verdict.explanation
    assert as_dict["ranks"][1] == {"rank": 1, "outcome": "loaded", "detail": "", "timings": verdict.ranks[1].timings,
                                   "final_digest": "w-last", "log": ""}
    interrupted = judge(launch("interrupted", *saver()), 1)
    assert interrupted.verdict == "interrupted"


def test_replicas_agree_diverge_or_are_unknown():
    assert replicas([RankOutcome(0, "loaded", final_digest="a"), RankOutcome(1, "stale", final_digest="a")]) == "agree"
    assert replicas([RankOutcome(0, "loaded", final_digest="a"), RankOutcome(1, "loaded", final_digest="b")]) == \
        "diverged"
    assert replicas([RankOutcome(0, "loaded", final_digest="a"), RankOutcome(1, "loaded")]) == "unknown"


def test_a_corrupt_read_is_told_by_its_error_type_or_message():
    assert is_corrupt_read("OSError", "[Errno 22] Invalid argument")
    assert not is_corrupt_read("OSError", "[Errno 5] Input/output error")
    assert not is_corrupt_read("ValueError", "Invalid argument")  # an OSError's text only
    for error_type in ("UnpicklingError", "EOFError", "BadZipFile"):
        assert is_corrupt_read(error_type, "")
    for text in ("PytorchStreamReader", "zip archive", "central directory", "unexpected EOF", "truncated"):
        assert is_corrupt_read("RuntimeError", f"x {text} y")
    assert not is_corrupt_read("RuntimeError", "size mismatch")
    assert classify_load_error("RuntimeError", "Weights only load failed. x") == "unsafe"
    assert classify_load_error("UnpicklingError", "Weights only load failed. x") == "unsafe"  # not corrupt
    # weights_only's reason, which error_fields puts after the first line: a global is code, an operand garbage
    assert classify_load_error("UnpicklingError", "Weights only load failed: Trying to load unsupported GLOBAL "
                                                  "posix.system whose module posix is blocked.") == "unsafe"
    assert classify_load_error("UnpicklingError", "Weights only load failed: Unsupported operand 0") == "corrupt"
    # torch 2.14 words it "WeightsUnpickler error: Unsupported global: GLOBAL <name> was not an allowed global": a
    # name is code; a GLOBAL that names nothing is bytes cut short (the fuzzer's one-byte file b"c")
    assert classify_load_error("UnpicklingError", "Weights only load failed: Unsupported global: GLOBAL os.system "
                                                  "was not an allowed global by default.") == "unsafe"
    assert classify_load_error("UnpicklingError", "Weights only load failed: Unsupported global: GLOBAL . was not "
                                                  "an allowed global by default.") == "corrupt"
    assert classify_load_error("IndexError", "index out of range", in_reader=True) == "corrupt"
    assert classify_load_error("IndexError", "index out of range") == "error"  # raised elsewhere: not the file's
    assert classify_load_error("FileNotFoundError", "truncated") == "missing"


def test_short_keeps_the_first_sentence_without_a_source_location():
    assert short("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer. More") == "Connection closed by peer"
    assert short("[c10d] Timed out") == "[c10d] Timed out"  # a bracket that is no location stays
    assert short("Error. In brackets [a/b] later") == "Error"
    assert short("x" * 200) == "x" * 120
    assert short("a.b. c") == "a.b"


def hung_run(status="ok", peer_place=None, *extra):
    """disagree x barrier: rank 1 skips and goes on to the end; rank 0 saves, waits in the barrier, and its
    watcher sees at once that rank 1 can never come (train/toolkit/hang.py); rank 1's leaving then breaks the wait."""
    place = peer_place or {"at": "end", "n": 0, "t": T0 + 6.0}
    return launch(status, *[ev(1, r, "rank_start") for r in range(2)],
                  ev(6.0, 1, "skip", reason="no checkpoint file when it looked (checkpoint.guard=sync)"),
                  ev(6.01, 1, "final", digest="w-1"), ev(9.05, 1, "rank_end"),
                  ev(8.9, 0, "save_start", epoch=2), ev(9.0, 0, "save_end", epoch=2, digest="w-last", bytes=1800),
                  ev(9.01, 0, "sync_enter", how="barrier"),
                  ev(9.03, 0, "hang", sync="barrier", n=1, waiting_for=[1], peers={"1": place}, certain_at=T0 + 9.02),
                  barrier_error(9.06, 0, False), ev(9.07, 0, "final", digest="w-0"), *extra)


def test_a_rank_whose_sync_could_never_end_is_hung_and_names_the_sync_and_where_the_peer_went():
    events = hung_run()
    assert detail(0, events) == ("hung", "its barrier could never end: rank 1 skipped the load and went on to the "
                                         "end of the run without entering it")
    assert detail(1, events)[0] == "skipped"  # the peer's outcome is what it was
    assert classify_rank(0, events).timings["wait"] == 0.02  # sync_enter to the hang, not to the broken wait
    verdict = judge(events, 2)
    assert (verdict.verdict, [r.outcome for r in verdict.ranks]) == ("race", ["hung", "skipped"])
    assert "rank 0 hung (its barrier could never end: rank 1 skipped the load and went on to the end of the run " \
        "without entering it; ended at once, not at timeout.collective_s)" in verdict.explanation


def test_a_hung_rank_that_had_to_be_ended_with_its_exit_code_is_still_hung_not_an_error():
    ended = ev(10.6, "launcher", "rank_failed", failed_rank=0, exitcode=124, message="exit code 124")
    events = [e for e in hung_run("failed", None, ended) if e["event"] != "sync_error"]  # its wait never broke
    verdict = judge(events, 2)
    assert (verdict.verdict, [r.outcome for r in verdict.ranks]) == ("race", ["hung", "skipped"])
    assert decide(verdict.ranks, events, "failed") == "race"


@pytest.mark.parametrize("place, words", [
    ({"at": "done", "n": 0}, "rank 1 skipped the load and had left the run without entering it"),
    ({"at": "sync", "how": "agree", "n": 1}, "rank 1 waited in its agree instead"),
])
def test_a_hung_rank_says_where_each_peer_was(place, words):
    assert detail(0, hung_run("ok", {**place, "t": T0 + 6.0}))[1] == f"its barrier could never end: {words}"
    no_skip = [e for e in hung_run("ok", {"at": "end", "n": 0, "t": T0 + 6.0}) if e["event"] != "skip"]
    assert detail(0, no_skip)[1] == "its barrier could never end: rank 1 went on to the end of the run without " \
                                    "entering it"


def test_a_hung_rank_names_every_peer_it_waited_for():
    peers = {"1": {"at": "end", "n": 0, "t": T0 + 6.0}, "2": {"at": "sync", "how": "agree", "n": 1, "t": T0 + 7.0}}
    events = launch("ok", ev(9.01, 0, "sync_enter", how="barrier"),
                    ev(9.03, 0, "hang", sync="barrier", n=1, waiting_for=[1, 2], peers=peers, certain_at=T0 + 9.02))
    assert detail(0, events) == ("hung", "its barrier could never end: rank 1 went on to the end of the run without "
                                         "entering it; rank 2 waited in its agree instead")


def test_saves_are_the_completed_ones_oldest_first_and_spans_read_well():
    events = [ev(1, 0, "save_start"), ev(2, 0, "save_end", digest="a"), ev(3, 0, "save_error"),
              ev(4, 0, "save_end", digest="b")]
    assert [e["digest"] for e in saves(events)] == ["a", "b"]
    assert (secs(2.94), secs(-2.94), secs(0.95), secs(0.949), secs(0.5)) == ("2.9", "-2.9", "0.9", "0.95", "0.50")
    assert (span([1.0]), span([1.0, 1.01]), span([0.5, 2.0])) == ("1.0 s", "1.0 s", "0.50-2.0 s")


def test_the_outcome_and_verdict_names_are_the_documented_ones():
    assert OUTCOMES == ("loaded", "skipped", "stale", "missing", "corrupt", "mixed", "unsafe", "timeout", "hung",
                        "aborted", "crashed", "raised", "error")
    assert VERDICTS == ("clean", "race", "save_failed", "error", "interrupted")
    assert Verdict("race", "x", "agree", []).as_dict() == {"verdict": "race", "explanation": "x", "replicas": "agree",
                                                           "ranks": []}




def test_a_rank_that_holds_a_skipped_peers_weights_no_file_holds_took_them_and_loaded_nothing():
    """The Trainer's copied rank0_leads (load_done from_disk=false): rank 0 decided not to load (its skip) and sent
    its own weights; rank 1 holds them, which no save wrote: skipped, with what its code said. Weights held from a
    file on its own disk (from_disk true, or not said) that no save wrote stay stale."""
    took = [*launch(), *saver(), ev(12.4, 0, "skip", reason="the save failed"), ev(12.45, 0, "final", digest="w-own"),
            ev(12.5, 1, "load_done", digest="w-own", from_disk=False, said="rank 0 did not load"),
            ev(12.6, 1, "final", digest="w-own")]
    took = [e for e in took if not (e["rank"] == 0 and e["event"] in ("load_attempt", "load_done", "final")
                                    and e["t"] < T0 + 12.4)]
    assert detail(1, took) == ("skipped", "it holds rank 0's weights, which no checkpoint holds (it said: rank 0 did "
                                          "not load)")
    from_a_file = [{**e, "from_disk": True} if e["event"] == "load_done" else e for e in took]
    assert detail(1, from_a_file) == ("stale", "loaded a file this run never wrote")


def test_a_stall_with_no_recorded_end_is_said_as_planned():
    """Rank 0's skew_start with no skew_end (its stall outlived what was recorded): the sentence says the planned
    stall; nothing raises."""
    events = launch("ok", ev(2, 0, "skew_start", seconds=3.0), *saver(), *loader(1, 12.01, digest="w-last"))
    assert "rank 0 was 3.0 s late at its last save" in judge(events, 2).explanation


def took_weights(**done):
    """Rank 0 skipped its load and ended on its own weights; rank 1's load_done holds `done`'s digest."""
    events = [*launch(), *[e for e in saver() if e["event"] in ("save_start", "save_end")],
              ev(12.4, 0, "skip", reason="the save failed"), ev(12.45, 0, "final", digest="w-own"),
              ev(12.5, 1, "load_done", **done), ev(12.6, 1, "final", digest=done["digest"])]
    return sorted(events, key=lambda e: e["t"])


def test_weights_taken_from_a_peer_are_said_only_when_that_peer_skipped_and_what_the_rank_said_only_if_it_said():
    assert detail(1, took_weights(digest="w-own", from_disk=False)) == \
        ("skipped", "it holds rank 0's weights, which no checkpoint holds")
    no_match = took_weights(digest="w-other", from_disk=False)  # no peer ended on these: not taken, never written
    assert detail(1, no_match) == ("stale", "loaded a file this run never wrote")
    not_skipped = [e for e in took_weights(digest="w-own", from_disk=False) if e["event"] != "skip"]
    assert detail(1, not_skipped) == ("stale", "loaded a file this run never wrote")


def test_a_rank_knows_the_save_failed_from_its_skip_or_what_its_code_said_and_not_from_another_event():
    from train.judge.vocabulary import says_save_failed

    said = took_weights(digest="w-own", from_disk=False, said="rank 0's save failed: not loading")
    assert says_save_failed(said, 1) and says_save_failed(said, 0)
    quiet = took_weights(digest="w-own", from_disk=False)
    assert not says_save_failed(quiet, 1)
    silent_skip = [ev(1, 1, "skip"), ev(2, 1, "final", said="the save failed", digest="x")]  # no reason; not a load
    assert not says_save_failed(silent_skip, 1)


def test_a_framework_call_that_raised_before_any_load_is_judged_from_its_train_error():
    events = launch("ok", *saver(), ev(12.5, 1, "train_error", what="trainer.validate", error_type="RuntimeError",
                                      message="gloo timed out", timed_out=True), ev(12.6, 1, "final", digest="w-t"))
    found = classify_rank(1, events)
    assert (found.outcome, found.detail) != ("error", "ended without loading")
    assert "trainer.validate" in found.detail
