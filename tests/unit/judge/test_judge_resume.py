"""The resume judged from hand-made events (workload=resume): restarts, the checkpoint each attempt resumed from,
shards, crash loops, and the whole judgement's sentence and record (train/judge/resume.py, shards.py,
crash_loop.py). No ranks."""
import pytest

from helpers.judge_events import launch, loader, outcome, saver
from train.judge.verdict import judge


# --- the resume loop (framework=torch_loop): hand-made events, no ranks --------------------------------------

def _resume_run(*rank_events, status="ok"):
    """A resume run's events: (t, rank, event, fields) tuples, with the launcher's start and end around them."""
    events = [{"t": 0.0, "rank": "launcher", "event": "launch_start"}]
    events += [{"t": t, "rank": r, "event": name, **fields} for t, r, name, fields in rank_events]
    events.append({"t": 99.0, "rank": "launcher", "event": "launch_end", "status": status})
    return sorted(events, key=lambda e: e["t"])


def _attempt0_killed_mid_epoch1():
    """Both ranks start fresh; rank 0 saves epoch 0 (step 10), then is killed halfway through epoch 1's file."""
    out = []
    for r in (0, 1):
        out += [(1.0, r, "loop_start", {"attempt": 0}),
                (1.1, r, "resume", {"attempt": 0, "epoch": -1, "step": 0, "path": None, "digest": "init"})]
    out += [(2.0, 0, "save_start", {"attempt": 0, "epoch": 0, "step": 10, "path": "m/epoch0.pt"}),
            (2.1, 0, "save_end", {"attempt": 0, "epoch": 0, "step": 10, "path": "m/epoch0.pt", "digest": "e0"}),
            (3.0, 0, "crash", {"attempt": 0, "at": "mid_write", "epoch": 1, "path": "m/epoch1.pt"})]
    return out


def test_resume_from_the_previous_complete_epoch_is_clean():
    from train.judge.verdict import judge

    events = _attempt0_killed_mid_epoch1()
    for r in (0, 1):
        events += [(5.0, r, "loop_start", {"attempt": 1}),
                   (5.1, r, "resume", {"attempt": 1, "epoch": 0, "step": 10, "path": "m/epoch0.pt", "digest": "e0"}),
                   (8.0, r, "final", {"attempt": 1, "digest": "end"})]
    v = judge(_resume_run(*events), 2).as_dict()
    assert v["verdict"] == "clean" and v["replicas"] == "agree"
    assert v["resume"]["run"] == "finished" and v["resume"]["restarts"] == 1
    assert v["resume"]["attempts"][0]["file"] == "m/epoch1.pt"  # the file attempt 0 died on
    assert all(r[-1]["steps_lost"] == 0 for r in v["resume"]["ranks"].values())


def test_a_finished_run_whose_last_dispatched_save_never_committed_is_missing_on_every_rank():
    """async_exit_pending, judged whole: one attempt, every rank finished, the last save dispatched and never
    committed (no save_commit of its step): not clean, every rank missing, the explanation says which save."""
    from train.judge.verdict import judge

    events = []
    for r in (0, 1):
        events += [(1.0, r, "loop_start", {"attempt": 0}),
                   (1.1, r, "resume", {"attempt": 0, "epoch": -1, "step": 0, "path": None, "digest": "init"}),
                   (8.0, r, "final", {"attempt": 0, "digest": "end"})]
    events += [(2.0, 0, "save_dispatch", {"attempt": 0, "epoch": 0, "step": 10, "path": "m/epoch0", "commits": True}),
               (2.5, 0, "save_commit", {"attempt": 0, "step": 10}),
               (4.0, 0, "save_dispatch", {"attempt": 0, "epoch": 1, "step": 20, "path": "m/epoch1", "commits": True})]
    v = judge(_resume_run(*events), 2).as_dict()
    assert v["verdict"] == "race" and {r["outcome"] for r in v["ranks"]} == {"missing"}, v["explanation"]
    assert "the save of step 20 (epoch1) dispatched and never committed" in v["explanation"]
    committed = events + [(6.0, 0, "save_commit", {"attempt": 0, "step": 20})]
    assert judge(_resume_run(*committed), 2).as_dict()["verdict"] == "clean"


def test_a_finished_attempt_whose_dispatched_save_never_committed_names_its_final_checkpoint_missing():
    """The judge's rule behind async_exit_pending, over records alone: a save_dispatch with commits and no
    save_commit of its step in the same attempt; a saver that records no commits (Lightning's) is not judged so."""
    from train.judge.resume import uncommitted

    def ev(name, step, attempt=0, **fields):
        return {"event": name, "step": step, "attempt": attempt, "rank": 0, "t": 0.0, **fields}

    events = [ev("save_dispatch", 10, commits=True, path="/x/epoch0"), ev("save_commit", 10),
              ev("save_dispatch", 20, commits=True, path="/x/epoch1")]
    assert "the save of step 20 (epoch1) dispatched and never committed" in uncommitted(events, 0)
    assert uncommitted(events + [ev("save_commit", 20)], 0) == ""
    assert uncommitted(events, 1) == ""  # another attempt's saves
    assert uncommitted(events + [ev("save_commit", 20, attempt=1)], 0) != ""  # a later attempt's commit is not it
    assert uncommitted([ev("save_dispatch", 10, path="/x/epoch=0.ckpt")], 0) == ""  # no commits: not judged so
    overlapping = events + [ev("save_dispatch", 30, commits=True, path="/x/epoch2")]  # two in flight: the newest
    assert "the save of step 30 (epoch2) dispatched" in uncommitted(overlapping, 0)


def test_a_crash_loop_on_a_torn_file_is_never_clean_and_names_the_file():
    from train.judge.verdict import judge

    events = _attempt0_killed_mid_epoch1()
    for n in (1, 2):
        events += [(5.0 * n, 0, "loop_start", {"attempt": n}),
                   (5.0 * n + 1, 0, "load_error", {"attempt": n, "path": "m/epoch1.pt", "error_type": "OSError",
                                                   "message": "[Errno 22] Invalid argument"})]
    v = judge(_resume_run(*events, status="failed"), 2).as_dict()
    assert v["verdict"] == "race" and v["resume"]["run"] == "out_of_restarts"
    assert [a["file"] for a in v["resume"]["attempts"]] == ["m/epoch1.pt"] * 3
    assert v["ranks"][0]["outcome"] == "corrupt"
    assert "ran out of restarts after 3 attempts" in v["explanation"]


def test_ranks_that_resume_from_different_steps_diverge_and_the_older_one_lost_steps():
    from train.judge.verdict import judge

    events = _attempt0_killed_mid_epoch1()
    events += [(2.5, 0, "save_end", {"attempt": 0, "epoch": 1, "step": 20, "path": "m/epoch1.pt", "digest": "e1"})]
    events += [(5.1, 0, "resume", {"attempt": 1, "epoch": 1, "step": 20, "path": "m/epoch1.pt", "digest": "e1"}),
               (5.1, 1, "resume", {"attempt": 1, "epoch": 0, "step": 10, "path": "m/epoch0.pt", "digest": "e0"}),
               (8.0, 0, "final", {"attempt": 1, "digest": "a"}), (8.0, 1, "final", {"attempt": 1, "digest": "b"})]
    v = judge(_resume_run(*events), 2).as_dict()
    assert v["verdict"] == "race" and v["replicas"] == "diverged" and v["resume"]["run"] == "diverged"
    assert v["resume"]["diverged_at_resume"] == [{0: 20, 1: 10}]
    assert v["ranks"][1]["outcome"] == "stale" and "10 steps redone" in v["ranks"][1]["detail"]


def test_a_delete_of_a_file_a_peer_deleted_is_missing_and_named():
    from train.judge.verdict import judge

    events = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
    events += [(2.0, 1, "rotate_error", {"attempt": 0, "path": "m/epoch0.pt", "error_type": "FileNotFoundError",
                                         "message": "[Errno 2] No such file or directory: 'm/epoch0.pt'"})]
    v = judge(_resume_run(*events, status="failed"), 2).as_dict()
    assert v["verdict"] == "race" and v["ranks"][1]["outcome"] == "missing"
    assert v["resume"]["attempts"][0]["error_type"] == "FileNotFoundError" and "FileNotFoundError" in v["explanation"]


def test_each_way_a_resume_attempt_ends_is_named():
    """attempt_end and resume_rank, branch by branch: no failure recorded, an error in training, a timed-out
    all-reduce after a late resume, a peer's death, a resume from a torn or a future file, a delete that failed
    for another reason, and a rank stopped by torch elastic."""
    from train.judge.resume import attempt_end
    from train.judge.verdict import judge


    quiet = _resume_run((1.0, 0, "loop_start", {"attempt": 0}), (1.0, 1, "loop_start", {"attempt": 0}),
                        status="failed")
    assert attempt_end(quiet, 0, finished=False) == {"attempt": 0, "ended": "died", "rank": None, "file": None,
                                                     "what": "no rank recorded why"}
    training = _resume_run((1.0, 0, "loop_start", {"attempt": 0}),
                           (2.0, 0, "train_error", {"attempt": 0, "epoch": 1, "error_type": "RuntimeError",
                                                    "message": "boom"}), status="failed")
    assert attempt_end(training, 0, False)["what"] == "rank 0 in epoch 1: RuntimeError: boom"
    v = judge(training, 2).as_dict()
    assert (v["ranks"][0]["outcome"], v["ranks"][1]["outcome"]) == ("aborted", "aborted")
    assert v["ranks"][1]["detail"] == "stopped by torch elastic when a peer failed"

    events = _attempt0_killed_mid_epoch1()
    events += [(2.5, 0, "save_end", {"attempt": 0, "epoch": 1, "step": 20, "path": "m/epoch1.pt", "digest": "e1"}),
               (5.1, 1, "resume", {"attempt": 1, "epoch": 0, "step": 10, "path": "m/epoch0.pt", "digest": "e0"}),
               (6.0, 1, "sync_error", {"attempt": 1, "how": "all-reduce", "error_type": "DistBackendError",
                                       "message": "timed out", "timed_out": True}),
               (6.0, 0, "sync_error", {"attempt": 1, "how": "all-reduce", "error_type": "DistBackendError",
                                       "message": "Connection closed by peer", "timed_out": False})]
    v = judge(_resume_run(*events, status="failed"), 2).as_dict()
    assert v["ranks"][1]["outcome"] == "timeout"
    assert v["ranks"][1]["detail"] == ("resumed from step 10 in attempt 1; the newest complete checkpoint was step "
                                       "20: 10 steps redone; then its all-reduce timed out waiting for a peer")
    assert v["ranks"][0]["outcome"] == "aborted"

    torn = _attempt0_killed_mid_epoch1()  # a later write of epoch 1 completed (e1); both read other bytes there
    torn += [(4.0, 0, "save_end", {"attempt": 0, "epoch": 1, "step": 20, "path": "m/epoch1.pt", "digest": "e1"})]
    for r in (0, 1):  # both resume from step 20's file, but not from the weights its complete save wrote
        torn += [(5.1, r, "resume", {"attempt": 1, "epoch": 1, "step": 20, "path": "m/epoch1.pt", "digest": "half"}),
                 (8.0, r, "final", {"attempt": 1, "digest": "end"})]
    v = judge(_resume_run(*torn), 2).as_dict()
    assert v["ranks"][0]["outcome"] == "corrupt" and "weights no complete save wrote" in v["ranks"][0]["detail"]

    ahead = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
    ahead += [(1.1, 0, "resume", {"attempt": 0, "epoch": 1, "step": 20, "path": "m/epoch1.pt", "digest": "e1"}),
              (1.1, 1, "resume", {"attempt": 0, "epoch": -1, "step": 0, "path": None, "digest": "init"}),
              (1.5, 0, "save_end", {"attempt": 0, "epoch": 0, "step": 10, "path": "m/epoch0.pt", "digest": "e0"}),
              (8.0, 0, "final", {"attempt": 0, "digest": "x"}), (8.0, 1, "final", {"attempt": 0, "digest": "x"})]
    v = judge(_resume_run(*ahead), 2).as_dict()
    assert v["ranks"][0]["outcome"] == "corrupt" and "ahead of every complete save" in v["ranks"][0]["detail"]

    denied = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
    denied += [(2.0, 0, "rotate_error", {"attempt": 0, "path": "m/epoch0.pt", "error_type": "PermissionError",
                                         "message": "[Errno 13] Permission denied"})]
    v = judge(_resume_run(*denied, status="failed"), 2).as_dict()
    assert v["ranks"][0]["outcome"] == "error" and v["verdict"] == "error"
    assert v["explanation"].startswith("error: rank 0 failed (deleting m/epoch0.pt: PermissionError")


def test_a_rank_killed_where_the_scenario_placed_it_is_crashed():
    from train.judge.verdict import judge


    events = _attempt0_killed_mid_epoch1()
    v = judge(_resume_run(*events, status="failed"), 2).as_dict()
    assert (v["ranks"][0]["outcome"], v["ranks"][0]["detail"]) == ("crashed", "killed with SIGKILL where the "
                                                                               "scenario placed it")


def test_an_interrupted_resume_run_gives_no_verdict():
    from train.judge.verdict import judge


    events = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
    v = judge(_resume_run(*events, status="interrupted"), 2).as_dict()
    assert (v["verdict"], v["resume"]["run"]) == ("interrupted", "interrupted")
    assert v["explanation"] == "interrupted: stopped before it ended"


def test_a_failed_read_always_says_something():
    from train.judge.vocabulary import classify_load_error, load_error_sentence

    assert classify_load_error("IsADirectoryError", "[Errno 21] Is a directory: 'best.pth'") == "corrupt"
    assert load_error_sentence("EOFError", "") == "EOFError: the file ended before a whole checkpoint (empty or cut short)"
    assert load_error_sentence("KeyError", "") == "KeyError, with no message"
    assert load_error_sentence("OSError", "[Errno 22] Invalid argument") == "OSError: [Errno 22] Invalid argument"


# --- the resume judgement, whole: the sentence, each rank's outcome and detail, and the run's record -----------

def _restart(events, n, t, resume=("m/epoch0.pt", 0, 10, "e0"), final="end"):
    """Attempt n of both ranks at t: each resumes from (path, epoch, step, digest) and finishes with `final`."""
    path, epoch, step, digest = resume
    out = list(events)
    for r in (0, 1):
        out += [(t, r, "loop_start", {"attempt": n}),
                (t + 0.1, r, "resume", {"attempt": n, "epoch": epoch, "step": step, "path": path, "digest": digest}),
                (t + 3.0, r, "final", {"attempt": n, "digest": final})]
    return out


FRESH = {"attempt": 0, "step": 0, "path": None, "newest_complete": None, "newest_step": 0, "steps_lost": 0,
         "torn": False}  # a rank's first attempt, with no checkpoint yet
KILLED_MID_WRITE = {"attempt": 0, "ended": "died", "rank": 0, "file": "m/epoch1.pt",
                    "what": "rank 0 killed with SIGKILL mid write (planted)", "error_type": None}


def test_a_restart_from_the_newest_complete_checkpoint_is_clean_and_the_record_says_each_step():
    v = judge(_resume_run(*_restart(_attempt0_killed_mid_epoch1(), 1, 5.0)), 2)
    assert v.explanation == ("clean: torch elastic restarted it 1 time (attempt 0 died on epoch1.pt: rank 0 killed "
                             "with SIGKILL mid write (planted)); every rank resumed from step 10, the newest complete "
                             "checkpoint, finished with agreeing replicas")
    assert [(r.outcome, r.detail, r.final_digest) for r in v.ranks] == [("loaded", "resumed from step 10", "end")] * 2
    from_epoch0 = {"attempt": 1, "step": 10, "path": "m/epoch0.pt", "newest_complete": "m/epoch0.pt",
                   "newest_step": 10, "steps_lost": 0, "torn": False}
    assert v.resume == {"run": "finished", "restarts": 1, "attempts": [KILLED_MID_WRITE,
                                                                       {"attempt": 1, "ended": "finished"}],
                        "ranks": {"0": [FRESH, from_epoch0], "1": [FRESH, from_epoch0]}, "diverged_at_resume": []}


def test_a_run_that_never_restarted_and_started_fresh_is_clean_without_a_resume_to_name():
    events = []
    for r in (0, 1):
        events += [(1.0, r, "loop_start", {"attempt": 0}),
                   (1.1, r, "resume", {"attempt": 0, "epoch": -1, "step": 0, "path": None, "digest": "init"}),
                   (8.0, r, "final", {"attempt": 0, "digest": "end"})]
    v = judge(_resume_run(*events), 2)
    assert (v.verdict, v.explanation) == ("clean", "clean: finished with agreeing replicas")
    assert [(r.outcome, r.detail) for r in v.ranks] == [("loaded", "")] * 2
    assert v.resume["restarts"] == 0 and v.resume["attempts"] == [{"attempt": 0, "ended": "finished"}]


def test_two_restarts_name_each_attempt_and_the_first_failure_in_it():
    """Attempt 1: rank 1 is killed, then rank 0's all-reduce breaks; the attempt died of the kill, the first."""
    events = _attempt0_killed_mid_epoch1()
    for r in (0, 1):
        events += [(5.0, r, "loop_start", {"attempt": 1}),
                   (5.1, r, "resume", {"attempt": 1, "epoch": 0, "step": 10, "path": "m/epoch0.pt", "digest": "e0"})]
    events += [(6.0, 1, "crash", {"attempt": 1, "at": "before_save", "epoch": 1, "path": "m/epoch1.pt"}),
               (6.5, 0, "sync_error", {"attempt": 1, "how": "all-reduce", "error_type": "DistBackendError",
                                       "message": "Connection closed by peer", "timed_out": False})]
    v = judge(_resume_run(*_restart(events, 2, 10.0)), 2)
    assert (v.verdict, v.explanation) == ("clean", (
        "clean: torch elastic restarted it 2 times (attempt 0 died on epoch1.pt: rank 0 killed with SIGKILL mid "
        "write (planted); attempt 1 died on epoch1.pt: rank 1 killed with SIGKILL before save (planted)); every "
        "rank resumed from step 10, the newest complete checkpoint, finished with agreeing replicas"))
    assert v.resume["attempts"][1] == {"attempt": 1, "ended": "died", "rank": 1, "file": "m/epoch1.pt",
                                       "what": "rank 1 killed with SIGKILL before save (planted)", "error_type": None}
    assert v.resume["restarts"] == 2


def test_a_crash_loop_on_a_torn_file_says_each_attempt_and_each_rank_in_one_sentence():
    events = _attempt0_killed_mid_epoch1()
    for n in (1, 2):
        events += [(5.0 * n, 0, "loop_start", {"attempt": n}),
                   (5.0 * n + 1, 0, "load_error", {"attempt": n, "path": "m/epoch1.pt", "error_type": "OSError",
                                                   "message": "[Errno 22] Invalid argument"})]
    v = judge(_resume_run(*events, status="failed"), 2)
    could_not = "rank 0 could not resume from it (corrupt: OSError: [Errno 22] Invalid argument)"
    assert v.explanation == (
        "race: ran out of restarts after 3 attempts (attempt 0 died on epoch1.pt: rank 0 killed with SIGKILL mid "
        f"write (planted); attempts 1-2 died on epoch1.pt: {could_not}); "
        "rank 0 corrupt (resuming from m/epoch1.pt: OSError: [Errno 22] Invalid argument); rank 1 aborted (stopped "
        "by torch elastic when a peer failed)")
    assert v.resume["attempts"][1:] == [{"attempt": n, "ended": "died", "rank": 0, "file": "m/epoch1.pt",
                                         "what": could_not, "error_type": "OSError"} for n in (1, 2)]
    assert (v.resume["run"], v.resume["restarts"], v.replicas) == ("out_of_restarts", 2, "unknown")


def _torn_reads(events, attempts, rank_of=lambda n: 0, path="m/epoch1.pt"):
    for n in attempts:
        events = events + [(5.0 * n, 0, "loop_start", {"attempt": n}),
                           (5.0 * n + 1, rank_of(n), "load_error", {"attempt": n, "path": path, "error_type": "OSError",
                                                                    "message": "[Errno 22] Invalid argument"})]
    return events


def test_a_crash_loop_is_certain_after_two_attempts_in_a_row_die_reading_the_same_file_whichever_rank():
    from train.judge.crash_loop import crash_loop

    def events_of(tuples):
        return _resume_run(*tuples, status="failed")

    killed = _attempt0_killed_mid_epoch1()
    assert crash_loop(events_of(killed)) is None  # one death, and a planted one
    assert crash_loop(events_of(_torn_reads(killed, [1]))) is None  # the planted kill and one torn read
    loop = crash_loop(events_of(_torn_reads(killed, [1, 2], rank_of=lambda n: n % 2)))
    assert loop == {"attempts": [1, 2], "doing": "reading", "file": "m/epoch1.pt", "kind": "corrupt",
                    "sentence": "crash loop: every attempt dies reading epoch1.pt (corrupt)"}
    other_file = _torn_reads(_torn_reads(killed, [1]), [2], path="m/epoch0.pt")
    assert crash_loop(events_of(other_file)) is None  # two deaths, two places: no loop yet
    # read late, once the agent has begun attempt 3 (seen under load): attempts 1 and 2 still prove it
    begun = _torn_reads(killed, [1, 2]) + [(16.0, r, "loop_start", {"attempt": 3}) for r in (0, 1)]
    assert crash_loop(events_of(begun))["attempts"] == [1, 2]


@pytest.mark.parametrize("failure, place", [
    ({"event": "rotate_error", "path": "m/epoch0.pt", "error_type": "FileNotFoundError", "message": "gone"},
     ("deleting", "m/epoch0.pt", "FileNotFoundError")),
    ({"event": "hang", "sync": "barrier"}, ("waiting in", "barrier", "hung")),
    ({"event": "sync_error", "how": "all-reduce", "error_type": "DistBackendError", "message": "closed"},
     ("in its all-reduce", None, "DistBackendError")),
    ({"event": "train_error", "error_type": "RuntimeError", "message": "nan"}, ("in its training", None, "RuntimeError")),
], ids=["rotate", "hang", "sync", "train"])
def test_a_crash_loop_is_named_by_what_every_attempt_died_doing(failure, place):
    from train.judge.crash_loop import crash_loop, place as place_of

    assert place_of(failure) == place
    events = _resume_run(*[(5.0 * n, 1 - n % 2, failure["event"], {"attempt": n, **{k: v for k, v in failure.items()
                                                                                     if k != "event"}})
                           for n in (1, 2)], status="failed")
    loop = crash_loop(events)
    doing, file, kind = place
    assert loop["sentence"] == f"crash loop: every attempt dies {doing}{' ' + file.rsplit('/', 1)[-1] if file else ''} ({kind})"
    gap = [e for e in events if e.get("attempt") != 2] + [{**e, "attempt": 3} for e in events if e.get("attempt") == 2]
    assert crash_loop(gap) is None  # attempts 1 and 3: one between them never recorded how it ended


def test_a_resume_attempt_ended_by_a_hang_says_which_sync_could_never_end():
    from train.judge.verdict import judge

    events = _attempt0_killed_mid_epoch1()
    events += [(5.0, r, "loop_start", {"attempt": 1}) for r in (0, 1)]
    events += [(6.0, 1, "hang", {"attempt": 1, "sync": "barrier", "waiting_for": [0],
                                 "peers": {"0": {"at": "end"}}})]
    v = judge(_resume_run(*events, status="failed"), 2)
    assert v.resume["attempts"][1]["what"] == "rank 1 hung: its barrier could never end"
    assert [(o.outcome, o.detail) for o in v.ranks][1] == (
        "hung", "its barrier could never end: rank 0 went on to the end of the run without entering it")
    assert v.verdict == "race"


def test_a_run_the_launcher_ended_as_a_crash_loop_says_so_first_and_groups_the_attempts():
    from train.judge.verdict import judge

    events = _torn_reads(_attempt0_killed_mid_epoch1(), [1, 2, 3])
    events.append((16.5, "launcher", "crash_loop", {"attempts": [2, 3], "doing": "reading", "file": "m/epoch1.pt",
                                                    "kind": "corrupt", "sentence": "crash loop: every attempt dies "
                                                                                  "reading epoch1.pt (corrupt)"}))
    events = _torn_reads(events, [4], rank_of=lambda n: 1)  # the agent restarted it once more as it stopped
    v = judge(_resume_run(*events, status="crash_loop"), 2)
    assert (v.verdict, v.resume["run"]) == ("race", "crash_loop")
    assert v.explanation.startswith(
        "race: crash loop: every attempt dies reading epoch1.pt (corrupt); ended after 4 attempts, the restarts left "
        "unused (attempt 0 died on epoch1.pt: rank 0 killed with SIGKILL mid write (planted); attempts 1-3 died on "
        "epoch1.pt: rank 0 could not resume from it (corrupt: OSError: [Errno 22] Invalid argument))"), v.explanation
    assert v.resume["restarts"] == 3  # attempt 4, begun as the launcher stopped the run, is no evidence
    assert v.resume["crash_loop"] == {"attempts": [2, 3], "doing": "reading", "file": "m/epoch1.pt",
                                      "kind": "corrupt", "sentence": "crash loop: every attempt dies reading "
                                                                     "epoch1.pt (corrupt)"}
    assert [o.outcome for o in v.ranks] == ["corrupt", "aborted"]  # as attempt 3 left them, not attempt 4
    assert v.resume["crash_loop"]["attempts"] == [2, 3]


def test_a_resume_run_stopped_at_its_time_limit_says_so_not_out_of_restarts():
    from train.judge.verdict import judge

    events = _torn_reads(_attempt0_killed_mid_epoch1(), [1], rank_of=lambda n: 1)
    v = judge(_resume_run(*events, status="timeout"), 2)
    assert (v.verdict, v.resume["run"]) == ("race", "timed_out")
    assert v.explanation.startswith("race: stopped by the launcher at timeout.run_s after 2 attempts (attempt 0 "), \
        v.explanation


def test_replicas_that_resumed_from_different_checkpoints_diverge_and_the_sentence_names_each_step():
    events = _attempt0_killed_mid_epoch1()
    events += [(2.5, 0, "save_end", {"attempt": 0, "epoch": 1, "step": 20, "path": "m/epoch1.pt", "digest": "e1"})]
    events += [(5.1, 0, "resume", {"attempt": 1, "epoch": 1, "step": 20, "path": "m/epoch1.pt", "digest": "e1"}),
               (5.1, 1, "resume", {"attempt": 1, "epoch": 0, "step": 10, "path": "m/epoch0.pt", "digest": "e0"}),
               (8.0, 0, "final", {"attempt": 1, "digest": "a"}), (8.0, 1, "final", {"attempt": 1, "digest": "b"})]
    v = judge(_resume_run(*events), 2)
    assert v.explanation == (
        "race: torch elastic restarted it 1 time (attempt 0 died on epoch1.pt: rank 0 killed with SIGKILL mid write "
        "(planted)); the replicas diverged from the first step: the ranks resumed from different checkpoints (rank 0 "
        "from step 20, rank 1 from step 10); rank 1 stale (resumed from step 10 in attempt 1; the newest complete "
        "checkpoint was step 20: 10 steps redone)")
    assert [(r.outcome, r.detail) for r in v.ranks] == [
        ("loaded", "resumed from step 20"),
        ("stale", "resumed from step 10 in attempt 1; the newest complete checkpoint was step 20: 10 steps redone")]
    assert v.resume["ranks"]["1"][1] == {"attempt": 1, "step": 10, "path": "m/epoch0.pt",
                                         "newest_complete": "m/epoch1.pt", "newest_step": 20, "steps_lost": 10,
                                         "torn": False}
    assert (v.resume["run"], v.resume["diverged_at_resume"]) == ("diverged", [{0: 20, 1: 10}])


def test_a_delete_of_a_file_a_peer_deleted_first_ends_the_run_and_is_named():
    events = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
    gone = "[Errno 2] No such file or directory: 'm/epoch0.pt'"
    events += [(2.0, 1, "rotate_error", {"attempt": 0, "path": "m/epoch0.pt", "error_type": "FileNotFoundError",
                                         "message": gone})]
    v = judge(_resume_run(*events, status="failed"), 2)
    assert v.explanation == (
        f"race: ran out of restarts after 1 attempt (attempt 0 died on epoch0.pt: rank 1 deleting it: "
        f"FileNotFoundError: {gone}); rank 0 aborted (stopped by torch elastic when a peer failed); rank 1 missing "
        f"(deleting m/epoch0.pt: FileNotFoundError: {gone})")
    assert v.resume["attempts"] == [{"attempt": 0, "ended": "died", "rank": 1, "file": "m/epoch0.pt",
                                     "what": f"rank 1 deleting it: FileNotFoundError: {gone}",
                                     "error_type": "FileNotFoundError"}]


def test_an_error_raised_while_the_file_was_decoded_is_corrupt_and_any_other_a_harness_error():
    """in_reader (error_fields): the reader failed on the file's bytes, whatever the error says; without it an
    unknown error is the harness's own. The same rule for the load at the end and for a resume."""
    odd = {"error_type": "RuntimeError", "message": "unexpected key in the stream"}
    assert outcome(1, launch("ok", *saver(), *loader(1, 12.5, in_reader=True, **odd))) == "corrupt"
    assert outcome(1, launch("ok", *saver(), *loader(1, 12.5, **odd))) == "error"

    def resumed(**fields):
        events = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
        events += [(2.0, 0, "load_error", {"attempt": 0, "path": "/ck/m/epoch1.pt", **odd, **fields})]
        return judge(_resume_run(*events, status="failed"), 2)

    decoded = resumed(in_reader=True)
    assert decoded.resume["attempts"][0]["what"] == ("rank 0 could not resume from it (corrupt: RuntimeError: "
                                                     "unexpected key in the stream)")
    assert (decoded.verdict, decoded.ranks[0].outcome) == ("race", "corrupt")
    own = resumed()
    assert own.resume["attempts"][0]["what"] == ("rank 0 could not resume from it (error: RuntimeError: unexpected "
                                                 "key in the stream)")
    assert (own.verdict, own.ranks[0].outcome) == ("error", "error")


def test_an_attempt_that_died_in_training_or_in_a_sync_names_no_file_and_the_epoch_where_known():
    events = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
    events += [(2.0, 1, "sync_error", {"attempt": 0, "how": "barrier", "error_type": "DistBackendError",
                                       "message": "Timed out waiting 8000ms. More", "timed_out": True}),
               (2.5, 0, "train_error", {"attempt": 0, "epoch": 1, "error_type": "RuntimeError", "message": "boom"})]
    v = judge(_resume_run(*events, status="failed"), 2)
    assert v.resume["attempts"] == [{"attempt": 0, "ended": "died", "rank": 1, "file": None,
                                     "what": "rank 1 in its barrier: DistBackendError: Timed out waiting 8000ms",
                                     "error_type": "DistBackendError"}]  # a sync's error names the sync
    assert v.explanation.startswith("race: ran out of restarts after 1 attempt (attempt 0 died on no file: rank 1 "
                                    "in its barrier: DistBackendError: Timed out waiting 8000ms); ")


def test_an_attempt_that_died_in_training_at_no_known_epoch_says_training():
    events = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
    events += [(2.0, 0, "train_error", {"attempt": 0, "error_type": "ValueError", "message": "no valid checkpoint"})]
    v = judge(_resume_run(*events, status="failed"), 2)
    assert v.resume["attempts"][0]["what"] == "rank 0 in training: ValueError: no valid checkpoint"


def test_the_file_an_attempt_died_on_is_named_by_its_own_name_not_its_folders():
    events = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
    events += [(3.0, 0, "crash", {"attempt": 0, "at": "mid_write", "epoch": 1, "path": "/tmp/run/models/epoch1.pt"})]
    v = judge(_resume_run(*events, status="failed"), 2)
    assert v.explanation.startswith("race: ran out of restarts after 1 attempt (attempt 0 died on epoch1.pt: ")
    assert v.resume["attempts"][0]["file"] == "/tmp/run/models/epoch1.pt"


def test_a_resume_ahead_of_every_complete_save_stays_ahead_when_a_later_save_reaches_that_step():
    """Rank 1 resumes from step 20 while only step 10 is complete; rank 0 resumed from step 10 and saves step 20
    later: what rank 1 read is judged against the saves that had ended when it read, not that later one."""
    events = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
    events += [(1.5, 0, "save_end", {"attempt": 0, "epoch": 0, "step": 10, "path": "/m/epoch0.pt", "digest": "e0"}),
               (5.0, 0, "resume", {"attempt": 1, "epoch": 0, "step": 10, "path": "/m/epoch0.pt", "digest": "e0"}),
               (5.0, 1, "resume", {"attempt": 1, "epoch": 1, "step": 20, "path": "/m/epoch1.pt", "digest": "x"}),
               (7.0, 0, "save_end", {"attempt": 1, "epoch": 1, "step": 20, "path": "/m/epoch1.pt", "digest": "y"}),
               (8.0, 0, "final", {"attempt": 1, "digest": "a"}), (8.0, 1, "final", {"attempt": 1, "digest": "b"})]
    v = judge(_resume_run(*events), 2)
    assert v.resume["ranks"]["1"] == [{"attempt": 1, "step": 20, "path": "/m/epoch1.pt",
                                       "newest_complete": "/m/epoch0.pt", "newest_step": 10, "steps_lost": -10,
                                       "torn": False}]
    assert (v.ranks[1].outcome, v.ranks[1].detail) == (
        "corrupt", "resumed from step 20, ahead of every complete save (step 10): 10 steps skipped")


def test_an_error_names_every_rank_that_failed():
    events = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
    events += [(2.0, r, "rotate_error", {"attempt": 0, "path": "/m/epoch0.pt", "error_type": "PermissionError",
                                         "message": "[Errno 13] Permission denied"}) for r in (0, 1)]
    v = judge(_resume_run(*events, status="failed"), 2)
    assert v.explanation == ("error: rank 0 failed (deleting /m/epoch0.pt: PermissionError: [Errno 13] Permission "
                             "denied); rank 1 failed (deleting /m/epoch0.pt: PermissionError: [Errno 13] Permission "
                             "denied)")


def _two_attempts(attempt1):
    """Attempt 0 killed mid epoch 1 (step 10 complete, step 20 too by the time of attempt 1), then attempt 1."""
    events = _attempt0_killed_mid_epoch1()
    events += [(2.5, 0, "save_end", {"attempt": 0, "epoch": 1, "step": 20, "path": "m/epoch1.pt", "digest": "e1"})]
    events += [(5.0, r, "loop_start", {"attempt": 1}) for r in (0, 1)]
    return events + attempt1


def test_a_timed_out_all_reduce_in_training_or_a_timed_out_sync_names_what_timed_out():
    """DDP's all-reduce in backward raises in training (train_error, no `how`); a watched sync names its own."""
    stuck = {"attempt": 1, "epoch": 1, "error_type": "DistBackendError", "message": "timed out", "timed_out": True}
    for event, fields, what in (("train_error", {}, "all-reduce"), ("sync_error", {"how": "barrier"}, "barrier")):
        v = judge(_resume_run(*_two_attempts([(6.0, 1, event, {**stuck, **fields})]), status="failed"), 2)
        assert (v.ranks[1].outcome, v.ranks[1].detail) == ("timeout", f"then its {what} timed out waiting for a peer")


def test_a_rank_whose_training_broke_when_a_peer_was_killed_is_aborted_by_it():
    v = judge(_resume_run(*_two_attempts([
        (5.1, 0, "resume", {"attempt": 1, "epoch": 1, "step": 20, "path": "m/epoch1.pt", "digest": "e1"}),
        (6.0, 1, "crash", {"attempt": 1, "at": "before_save", "epoch": 2, "path": "m/epoch2.pt"}),
        (6.1, 0, "train_error", {"attempt": 1, "epoch": 2, "error_type": "DistBackendError",
                                 "message": "Connection closed by peer", "timed_out": False})]), status="failed"), 2)
    assert [(r.outcome, r.detail) for r in v.ranks] == [
        ("aborted", "DistBackendError when a peer died"), ("crashed", "killed with SIGKILL where the scenario placed it")]
    assert v.ranks[0].timings == {}  # the milestones of its last attempt: none of them reached


def test_ranks_that_both_resumed_from_an_older_checkpoint_agree_yet_are_stale_and_the_run_a_race():
    older = ("m/epoch0.pt", 0, 10, "e0")
    v = judge(_resume_run(*_restart(_two_attempts([]), 1, 5.0, resume=older)), 2)
    assert (v.verdict, v.replicas, v.resume["run"]) == ("race", "agree", "finished")
    assert [(r.outcome, r.timings) for r in v.ranks] == [("stale", {"final": 8.0})] * 2
    assert v.explanation.endswith("; rank 0 stale (resumed from step 10 in attempt 1; the newest complete checkpoint "
                                  "was step 20: 10 steps redone); rank 1 stale (resumed from step 10 in attempt 1; "
                                  "the newest complete checkpoint was step 20: 10 steps redone)")


def test_a_single_step_redone_is_stale():
    """One batch per epoch: the newest complete save is one step ahead of the one both ranks resumed from."""
    events = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
    events += [(1.5, 0, "save_end", {"attempt": 0, "epoch": 0, "step": 1, "path": "m/epoch0.pt", "digest": "e0"}),
               (2.5, 0, "save_end", {"attempt": 0, "epoch": 1, "step": 2, "path": "m/epoch1.pt", "digest": "e1"}),
               (3.0, 0, "crash", {"attempt": 0, "at": "mid_write", "epoch": 2, "path": "m/epoch2.pt"})]
    v = judge(_resume_run(*_restart(events, 1, 5.0, resume=("m/epoch0.pt", 0, 1, "e0"))), 2)
    assert [(r.outcome, r.detail) for r in v.ranks] == [
        ("stale", "resumed from step 1 in attempt 1; the newest complete checkpoint was step 2: 1 steps redone")] * 2


def test_replicas_that_resumed_from_different_checkpoints_have_diverged_even_if_they_end_alike():
    v = judge(_resume_run(*_two_attempts([
        (5.1, 0, "resume", {"attempt": 1, "epoch": 1, "step": 20, "path": "m/epoch1.pt", "digest": "e1"}),
        (5.1, 1, "resume", {"attempt": 1, "epoch": 0, "step": 10, "path": "m/epoch0.pt", "digest": "e0"}),
        (8.0, 0, "final", {"attempt": 1, "digest": "same"}), (8.0, 1, "final", {"attempt": 1, "digest": "same"})])),
        2)
    assert (v.verdict, v.replicas, v.resume["run"]) == ("race", "diverged", "diverged")


def test_each_attempt_whose_ranks_resumed_from_different_checkpoints_is_named():
    events = []
    for n, steps in enumerate(((10, 0), (20, 10), (20, 20))):  # attempts 0 and 1 split, attempt 2 agrees
        for r, step in enumerate(steps):
            events += [(5.0 * n + 1, r, "loop_start", {"attempt": n}),
                       (5.0 * n + 1.1, r, "resume", {"attempt": n, "epoch": step // 10 - 1, "step": step,
                                                     "path": f"m/s{step}.pt" if step else None, "digest": f"d{step}"})]
    v = judge(_resume_run(*events, status="failed"), 2)
    assert v.resume["diverged_at_resume"] == [{0: 10, 1: 0}, {0: 20, 1: 10}]


def test_a_run_that_ran_out_of_restarts_has_no_loaded_rank_even_one_that_reached_its_end():
    v = judge(_resume_run(*_restart(_attempt0_killed_mid_epoch1(), 1, 5.0), status="failed"), 2)
    assert [(r.outcome, r.detail) for r in v.ranks] == [("aborted", "stopped by torch elastic when a peer failed")] * 2
    assert (v.verdict, v.resume["run"]) == ("race", "out_of_restarts")
    assert v.explanation.startswith("race: ran out of restarts after 2 attempts (")


def test_a_resume_run_whose_launch_failed_is_an_error_not_a_race():
    v = judge(_resume_run(*_restart(_attempt0_killed_mid_epoch1(), 1, 5.0), status="harness_error"), 2)
    assert (v.verdict, v.resume["run"]) == ("error", "error")
    assert v.explanation == "error: the launch failed before a rank said why"


def test_a_hang_beside_an_async_save_names_where_the_save_holds_the_peer():
    from train.judge.load_best import _last_save_began, hang_detail

    hang = {"sync": "barrier", "waiting_for": [0], "peers": {"0": {"at": "paired", "how": "is in the async save's gather"}}}
    assert hang_detail(hang, []) == "its barrier could never end: rank 0 is in the async save's gather"
    assert _last_save_began([]) is None  # a run that never began a save


def test_a_crash_loop_needs_two_failed_attempts_neither_a_planted_kill_and_reads_each_failure_as_recorded():
    from train.judge.crash_loop import crash_loop, place

    def run(*tuples):
        return _resume_run(*tuples, status="failed")

    torn = {"path": "m/epoch1.pt", "error_type": "OSError", "message": "[Errno 22] Invalid argument"}
    began = [(5.0, 0, "loop_start", {"attempt": 1})]  # attempt 1 began and recorded no failure
    assert crash_loop(run(*began, (10.0, 0, "load_error", {"attempt": 2, **torn}))) is None
    assert crash_loop(run((5.0, 0, "load_error", {"attempt": 1, **torn}), (10.0, 0, "loop_start", {"attempt": 2}))) \
        is None
    kills = [(5.0 * n, 0, "crash", {"attempt": n, "at": "mid_write", "path": "m/epoch1.pt"}) for n in (1, 2)]
    assert crash_loop(run(*kills)) is None  # the same planted kill twice is the scenario, not a loop
    # the first failure of an attempt decides where it died: a planted kill before a peer's torn read ...
    killed_first = [(5.0 * n + d, r, name, {"attempt": n, **fields}) for n in (1, 2) for d, r, name, fields in
                    ((0.5, 0, "crash", {"at": "mid_write", "path": "m/epoch1.pt"}), (1.0, 1, "load_error", torn))]
    assert crash_loop(run(*killed_first)) is None
    # ... and a torn read before the peer's broken all-reduce (two failures in one attempt, the earlier one counts)
    torn_first = [(5.0 * n + d, r, name, {"attempt": n, **fields}) for n in (1, 2) for d, r, name, fields in
                  ((1.5, 0, "sync_error", {"how": "all-reduce", "error_type": "DistBackendError", "message": "x"}),
                   (1.0, 1, "load_error", torn))]
    assert crash_loop(run(*torn_first))["sentence"] == "crash loop: every attempt dies reading epoch1.pt (corrupt)"
    # a failure raised inside the reader is the file's (corrupt), else the harness's kind
    odd = {"event": "load_error", "path": "m/e.pt", "error_type": "KeyError", "message": "storages"}
    assert place({**odd, "in_reader": True}) == ("reading", "m/e.pt", "corrupt")
    assert place(odd) == ("reading", "m/e.pt", "error")
    assert place({"event": "train_error", "path": "m/e.pt", "error_type": "RuntimeError", "message": "x"}) == \
        ("in its training", "m/e.pt", "RuntimeError")


def test_attempts_that_died_alike_on_different_ranks_are_said_once_as_a_rank():
    from train.judge.verdict import judge

    events = _torn_reads(_attempt0_killed_mid_epoch1(), [1, 2, 3], rank_of=lambda n: n % 2)
    v = judge(_resume_run(*events, status="failed"), 2)
    assert "; attempts 1-3 died on epoch1.pt: a rank could not resume from it (corrupt: OSError: [Errno 22] " \
           "Invalid argument))" in v.explanation, v.explanation


def test_a_resume_run_stopped_at_its_limit_before_any_death_says_none_died():
    from train.judge.verdict import judge

    events = [(1.0, r, "loop_start", {"attempt": 0}) for r in (0, 1)]
    v = judge(_resume_run(*events, status="timeout"), 2)
    assert v.explanation.startswith("race: stopped by the launcher at timeout.run_s after 1 attempt (none died)"), \
        v.explanation


def test_a_crash_loop_status_without_the_launchers_record_reads_as_out_of_restarts():
    from train.judge.verdict import judge

    events = _torn_reads(_attempt0_killed_mid_epoch1(), [1])  # one torn read: no loop to be found in the records
    v = judge(_resume_run(*events, status="crash_loop"), 2)
    assert (v.resume["run"], v.resume["crash_loop"]) == ("crash_loop", None)
    assert v.explanation.startswith("race: ran out of restarts after 2 attempts ("), v.explanation


def _resumed(n, t, *ranks):
    """Attempt n of the ranks at t: each resumes from epoch 0's file (step 10)."""
    return [x for r in ranks for x in ((t, r, "loop_start", {"attempt": n}),
                                       (t + 0.1, r, "resume", {"attempt": n, "epoch": 0, "step": 10,
                                                               "path": "m/epoch0.pt", "digest": "e0"}))]


def test_a_resume_run_stopped_at_its_time_limit_mid_attempt_says_the_launcher_stopped_that_attempt_and_each_rank():
    events = _attempt0_killed_mid_epoch1() + _resumed(1, 5.0, 0, 1)  # attempt 1 still training at the limit
    v = judge(_resume_run(*events, status="timeout"), 2)
    assert [(o.outcome, o.detail) for o in v.ranks] == [("timeout", "stopped by the launcher at timeout.run_s")] * 2
    assert v.resume["attempts"] == [KILLED_MID_WRITE, {"attempt": 1, "ended": "stopped",
                                                       "what": "stopped by the launcher at timeout.run_s"}]
    assert v.explanation == (
        "race: stopped by the launcher at timeout.run_s after 2 attempts (attempt 0 died on epoch1.pt: rank 0 killed "
        "with SIGKILL mid write (planted)); rank 0 timeout (stopped by the launcher at timeout.run_s); rank 1 timeout "
        "(stopped by the launcher at timeout.run_s)")


def test_only_the_time_limit_turns_an_attempt_that_recorded_no_death_into_a_stopped_one():
    quiet = _attempt0_killed_mid_epoch1() + _resumed(1, 5.0, 0, 1)  # attempt 1 ended, no rank said why
    v = judge(_resume_run(*quiet, status="failed"), 2)
    assert v.resume["attempts"][-1] == {"attempt": 1, "ended": "died", "rank": None, "file": None,
                                        "what": "no rank recorded why"}
    torn = _torn_reads(_attempt0_killed_mid_epoch1(), [1], rank_of=lambda n: 1)  # attempt 1 died, then the limit
    v = judge(_resume_run(*torn, status="timeout"), 2)
    assert (v.resume["attempts"][-1]["ended"], v.resume["attempts"][-1]["rank"]) == ("died", 1)


def test_a_crash_loops_record_keeps_the_resumes_of_its_last_attempt_and_leaves_out_the_one_begun_as_it_stopped():
    nan = {"error_type": "RuntimeError", "message": "loss is nan"}
    events = _attempt0_killed_mid_epoch1()
    for n in (1, 2):
        events += _resumed(n, 5.0 * n, 0, 1) + [(5.0 * n + 1, 0, "train_error", {"attempt": n, **nan})]
    events.append((11.5, "launcher", "crash_loop", {"attempts": [1, 2], "doing": "in its training", "file": None,
                                                    "kind": "RuntimeError", "sentence": "crash loop: every attempt "
                                                                                        "dies in its training "
                                                                                        "(RuntimeError)"}))
    events += _resumed(3, 15.0, 0, 1)  # the agent began attempt 3 as the launcher stopped the run
    v = judge(_resume_run(*events, status="crash_loop"), 2)
    assert [[r["attempt"] for r in v.resume["ranks"][str(rank)]] for rank in (0, 1)] == [[0, 1, 2]] * 2


def _your_resume_raised(by: str = "my/ckpt.py:41"):
    """Attempt 1: rank 1's resume (a class of yours) lists epoch1's folder and raises an AssertionError there (what
    DeepSpeed's load_checkpoint raises for a tag with no model file on this rank's disk); its rank_error's `by`
    is your code's frame, as train/rank/observe.py records it ("" : no frame of yours)."""
    events = _attempt0_killed_mid_epoch1()
    events += [(5.0, 1, "loop_start", {"attempt": 1}),
               (5.1, 1, "file_op", {"attempt": 1, "op": "list", "path": "m/epoch1", **({"by": by} if by else {})}),
               (5.2, 1, "load_error", {"attempt": 1, "path": None, "error_type": "AssertionError", "message": ""}),
               (5.3, 1, "rank_error", {"attempt": 1, "error_type": "AssertionError", "message": "",
                                       **({"by": by} if by else {})})]
    return judge(_resume_run(*events, status="failed"), 2).as_dict()


def test_a_resume_of_yours_that_raised_is_your_codes_failure_naming_the_folder_it_listed_and_your_frame():
    v = _your_resume_raised()
    assert v["verdict"] == "race"
    assert v["ranks"][1]["outcome"] == "raised"
    assert v["ranks"][1]["detail"] == "your code raised AssertionError, with no message, in my/ckpt.py:41"
    assert v["resume"]["attempts"][1]["file"] == "m/epoch1"
    assert v["resume"]["attempts"][1]["what"] == ("rank 1 could not resume from it: your code raised AssertionError, "
                                                  "with no message, in my/ckpt.py:41")


def test_a_resume_that_raised_with_no_frame_of_yours_stays_the_harness_error_naming_no_file():
    v = _your_resume_raised(by="")
    assert v["ranks"][1]["outcome"] == "error"
    assert v["ranks"][1]["detail"] == "resuming from the folder: AssertionError, with no message"
    assert v["resume"]["attempts"][1]["file"] is None
