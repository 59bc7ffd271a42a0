"""The classification functions, from hand-built event lists."""
from train.outcomes import classify_load_error, classify_rank, judge, replicas

T0 = 1000.0


def ev(t, rank, event, **fields):
    return {"t": T0 + t, "rank": rank, "event": event, **fields}


def launch(status="ok", *extra):
    return [ev(0, "launcher", "launch_start"), *extra, ev(30, "launcher", "launch_end", status=status)]


def saver(digests=("w-last",), end=12.0):
    """Rank 0 saves once per digest (1800 bytes each); the last save ends at `end`."""
    out = []
    for i, d in enumerate(digests):
        t = end - (len(digests) - 1 - i) * 3
        out += [ev(t - 0.1, 0, "save_start", epoch=i), ev(t, 0, "save_end", epoch=i, digest=d, bytes=1800)]
    return out + [ev(end + 0.1, 0, "load_attempt"), ev(end + 0.2, 0, "load_done", digest=digests[-1]),
                  ev(end + 0.25, 0, "final", digest=digests[-1]), ev(end + 0.3, 0, "rank_end")]


def loader(rank, t, final=None, **result):
    """A rank that loads at t; `final`: the weights it ends with (by default what it loaded, else its own)."""
    name = "load_done" if "digest" in result else "load_error"
    final = final or result.get("digest", "w-trained")
    return [ev(t, rank, "load_attempt"), ev(t + 0.01, rank, name, **result),
            ev(t + 0.015, rank, "final", digest=final), ev(t + 0.02, rank, "rank_end")]


def outcome(rank, events):
    return classify_rank(rank, events).outcome


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
                                   "device); every rank agreed not to load and all hold the same weights")
    diverged = [e if e["event"] != "final" or e["rank"] != 1 else {**e, "digest": "other"} for e in events]
    assert judge(diverged, 2).verdict == "race"


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


def test_a_rank_that_finds_no_file_on_its_own_node_is_told_where_the_file_is():
    nodes = [ev(0.1, 0, "rank_start", node=0), ev(0.1, 1, "rank_start", node=1),
             ev(1, 0, "fit_start", node_local=True), ev(1, 1, "fit_start", node_local=True)]
    events = launch("ok", *nodes, *saver(end=12.0),
                    *loader(1, 12.05, error_type="FileNotFoundError", message="No such file"))
    assert judge(events, 2).explanation.startswith(
        "race: rank 1 tried to load (FileNotFoundError): the file is on node 0's own disk; node 1's disk has none")

    shared = [{**e, "node_local": False} if e["event"] == "fit_start" else e for e in events]
    assert "own disk" not in judge(shared, 2).explanation  # a shared filesystem: no such claim
