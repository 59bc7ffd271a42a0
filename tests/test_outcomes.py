"""The classification functions, from hand-built event lists."""
from train.outcomes import classify_load_error, classify_rank, judge

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
                  ev(end + 0.3, 0, "rank_end")]


def loader(rank, t, **result):
    name = "load_done" if "digest" in result else "load_error"
    return [ev(t, rank, "load_attempt"), ev(t + 0.01, rank, name, **result), ev(t + 0.02, rank, "rank_end")]


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


def test_other_load_errors_are_errors():
    events = launch("ok", *saver(), *loader(1, 12.5, error_type="RuntimeError", message="size mismatch"))
    assert outcome(1, events) == "error"


def test_timeout_when_the_barrier_timed_out():
    events = launch("ok", *saver(end=40), ev(9, 1, "barrier_enter"),
                    ev(14, 1, "barrier_error", error_type="DistBackendError", message="Timed out", timed_out=True),
                    ev(14.1, 1, "rank_end"))
    result = classify_rank(1, events)
    assert result.outcome == "timeout"
    assert result.timings["wait"] == 5.0


def test_timeout_when_the_launcher_stopped_the_run_at_run_s():
    events = launch("timeout", ev(1, 1, "rank_start"), ev(9, 1, "barrier_enter"))
    assert outcome(1, events) == "timeout"


def test_aborted_when_the_launcher_stopped_it_after_a_peer_failed():
    events = launch("failed", ev(1, 0, "rank_start"), ev(1, 1, "rank_start"), ev(9, 0, "crash"),
                    ev(9.1, "launcher", "rank_failed", failed_rank=0, exitcode=1, message="exit code 1"),
                    ev(9, 1, "barrier_enter"))
    assert outcome(0, events) == "error"
    assert outcome(1, events) == "aborted"


def test_error_when_a_rank_ended_without_loading():
    events = launch("ok", *saver(), ev(1, 1, "rank_start"), ev(20, 1, "rank_end"))
    assert outcome(1, events) == "error"


def test_verdict_clean_only_when_every_rank_loaded():
    clean = launch("ok", *saver(), *loader(1, 12.01, digest="w-last"), *loader(2, 12.02, digest="w-last"))
    verdict = judge(clean, 3)
    assert verdict.verdict == "clean"
    assert verdict.explanation.startswith("clean: every rank loaded the last checkpoint rank 0 wrote")

    one_missing = launch("ok", *saver(), *loader(1, 12.01, digest="w-last"),
                         *loader(2, 9.1, error_type="FileNotFoundError", message="No such file"))
    assert judge(one_missing, 3).verdict == "race"


def test_race_explanation_names_the_ranks_the_lead_and_the_error():
    events = launch("ok", *saver(end=12.0), *loader(1, 9.1, error_type="FileNotFoundError", message="x"),
                    *loader(2, 9.1, error_type="FileNotFoundError", message="x"))
    verdict = judge(events, 3)
    assert verdict.explanation == \
        "race: ranks 1, 2 tried to load 2.9 s before rank 0 finished saving (FileNotFoundError)"
    assert [r.outcome for r in verdict.ranks] == ["loaded", "missing", "missing"]
    assert verdict.ranks[1].timings["load_after_save_end"] == -2.9


def test_a_barrier_broken_by_an_interrupt_is_aborted_not_an_error():
    broke = ev(9.5, 1, "barrier_error", error_type="RuntimeError", message="Connection reset by peer",
               timed_out=False)
    assert outcome(1, launch("interrupted", ev(9, 1, "barrier_enter"), broke)) == "aborted"
    assert outcome(1, launch("ok", ev(9, 1, "barrier_enter"), broke)) == "error"
