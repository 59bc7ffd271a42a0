"""Judging sharded state (train/judge/shards.py), from hand-made events: a resume whose ranks read different steps,
or a shard holding another step's write, or a rank that started fresh beside peers that resumed, is `mixed` and
never clean, though every load returned; the explanation names the rank. No ranks run here."""
import pytest

from train.judge.shards import mixed_resumes, never_written, written
from train.judge.verdict import judge


def run(*rank_events, status="ok"):
    events = [{"t": 0.0, "rank": "launcher", "event": "launch_start"}]
    events += [{"t": t, "rank": r, "event": name, "attempt": n, **fields} for t, r, n, name, fields in rank_events]
    events.append({"t": 99.0, "rank": "launcher", "event": "launch_end", "status": status})
    return sorted(events, key=lambda e: e["t"])


def saved(t, step, digests, attempt=0, commit=True):
    """Both ranks write their shard of `step` (digests: shard -> digest); rank 0 commits it (save_end) if asked."""
    out = [(t, r, attempt, "shard_write", {"step": step, "shard": r, "digest": d}) for r, d in digests.items()]
    if commit:
        out.append((t + 0.1, 0, attempt, "save_end", {"epoch": step // 10 - 1, "step": step,
                                                      "path": f"m/step{step}", "digest": f"w{step}"}))
    return out


def resumed(t, rank, attempt, step, shards, path="m/ckpt", digest=None):
    """`rank` resumes at `step` (None: fresh), having read shards {shard: digest} from path."""
    out = [(t, rank, attempt, "loop_start", {}),
           (t + 0.1, rank, attempt, "resume", {"epoch": -1 if step is None else step // 10 - 1, "step": step or 0,
                                                "path": None if step is None else path,
                                                "digest": digest or f"w{step}"})]
    out += [(t + 0.05, rank, attempt, "shard_read", {"step": step, "shard": s, "digest": d, "path": path})
            for s, d in shards.items()]
    return out + [(t + 3, rank, attempt, "final", {"digest": "end"})]


STEP10 = {0: "a10", 1: "b10"}
STEP30 = {0: "a30", 1: "b30"}


def overwritten_in_place():
    """Step 10 committed in m/ckpt; the step-30 save into the same folder: rank 0 wrote its shard, rank 1 died
    before writing; .metadata is still step 10's. The restart reads rank 0's new shard and rank 1's old one."""
    events = [*saved(1.0, 10, STEP10), *saved(2.0, 30, {0: "a30"}, commit=False),
              (2.2, 1, 0, "crash", {"at": "before_write", "epoch": 2, "path": "m/ckpt"})]
    for r in (0, 1):
        events += resumed(5.0, r, 1, 10, {0: "a30", 1: "b10"})  # every load returned, saying step 10
    return events


def test_a_shard_that_holds_another_steps_write_is_mixed_and_names_the_rank_and_shard():
    v = judge(run(*overwritten_in_place()), 2).as_dict()
    assert v["verdict"] == "race"
    assert [r["outcome"] for r in v["ranks"]] == ["mixed", "mixed"]
    assert "rank 0 mixed (attempt 1: shard 0 it read as step 10 holds what rank 0 wrote at step 30)" in v["explanation"]
    assert v["resume"]["mixed"]["1"].startswith("attempt 1: shard 0")


def test_ranks_that_resumed_from_different_steps_are_mixed():
    events = [*saved(1.0, 10, STEP10), *saved(2.0, 20, {0: "a20", 1: "b20"})]
    events += resumed(5.0, 0, 1, 20, {0: "a20", 1: "b20"}) + resumed(5.0, 1, 1, 10, STEP10)
    v = judge(run(*events), 2).as_dict()
    assert {r["outcome"] for r in v["ranks"]} == {"mixed"}
    assert "rank 0 mixed (attempt 1: it resumed from step 20 while rank 1 resumed from step 10)" in v["explanation"]


def test_a_rank_that_started_fresh_beside_peers_that_resumed_is_mixed():
    events = [*saved(1.0, 10, STEP10)]
    events += resumed(5.0, 0, 1, 10, STEP10) + resumed(5.0, 1, 1, None, {})
    why = mixed_resumes(run(*events), 2)
    assert why[1] == "attempt 1: it started fresh while rank 0 resumed from step 10"
    assert why[0] == "attempt 1: it resumed from step 10 while rank 1 started fresh"
    assert judge(run(*events), 2).verdict == "race"


def test_every_shard_of_its_own_step_is_not_mixed():
    events = [*saved(1.0, 10, STEP10), *saved(2.0, 30, STEP30)]
    for r in (0, 1):
        events += resumed(5.0, r, 1, 30, STEP30)
    v = judge(run(*events), 2)
    assert mixed_resumes(run(*events), 2) == {}
    assert v.verdict == "clean", v.explanation


def test_a_shard_written_alike_at_two_steps_is_its_own_step_not_another():
    """A shard whose tensors did not change between steps has one digest at both: that is no mix."""
    events = [*saved(1.0, 10, STEP10), *saved(2.0, 30, {0: "a30", 1: "b10"})]
    for r in (0, 1):
        events += resumed(5.0, r, 1, 30, {0: "a30", 1: "b10"})
    assert written(run(*events))[(30, 1)] == {"b10"}
    assert mixed_resumes(run(*events), 2) == {}


def test_every_rank_fresh_is_not_a_mix():
    events = [*resumed(1.0, 0, 0, None, {}), *resumed(1.0, 1, 0, None, {})]
    assert mixed_resumes(run(*events), 2) == {}
    assert judge(run(*events), 2).verdict == "clean"


def test_a_rank_with_no_resume_in_an_attempt_is_not_judged_there():
    """Attempt 1: rank 0 resumed from its shards, rank 1 died before it resumed: only rank 0 is weighed."""
    events = [*saved(1.0, 10, STEP10), *resumed(5.0, 0, 1, 10, STEP10)]
    assert mixed_resumes(run(*events), 2) == {}


def test_a_hang_in_a_resume_run_is_hung_and_the_attempt_says_so():
    hang = {"sync": "collectives on the training's process group", "n": 0, "waiting_for": [1], "certain_at": 3.0,
            "peers": {"1": {"at": "paired", "how": "had its async save's collectives and its training's waiting on "
                                                   "the same group"}}}
    events = [*resumed(1.0, 0, 0, None, {}), *resumed(1.0, 1, 0, None, {})]
    events = [e for e in events if e[3] != "final"] + [(3.0, 0, 0, "hang", hang),
                                                         (3.0, 1, 0, "hang", {**hang, "waiting_for": [0],
                                                                              "peers": {"0": hang["peers"]["1"]}})]
    v = judge(run(*events, status="failed"), 2).as_dict()
    assert [r["outcome"] for r in v["ranks"]] == ["hung", "hung"]
    assert v["resume"]["attempts"][0]["what"] == ("rank 0 hung: its collectives on the training's process group "
                                                  "could never end")
    assert "rank 1 had its async save's collectives and its training's waiting on the same group" in v["explanation"]


STEP20 = {0: "a20", 1: "b20"}


def test_only_the_rank_that_read_another_steps_shard_is_mixed_and_the_step_named_is_the_one_it_matches():
    """Three saves; rank 1's copy of shard 1 (said to be step 30) holds step 10's write, rank 0's is step 30's."""
    events = [*saved(1.0, 10, STEP10), *saved(2.0, 20, STEP20), *saved(3.0, 30, STEP30)]
    events += resumed(5.0, 0, 1, 30, STEP30) + resumed(5.0, 1, 1, 30, {0: "a30", 1: "b10"})
    assert mixed_resumes(run(*events), 2) == {1: "attempt 1: shard 1 it read as step 30 holds what rank 1 wrote at "
                                                 "step 10"}


def test_a_shard_that_matches_the_writes_of_several_other_steps_names_each():
    """Shard 1 did not change between steps 10 and 20: its bytes are both steps' write."""
    events = [*saved(1.0, 10, STEP10), *saved(2.0, 20, {0: "a20", 1: "b10"}), *saved(3.0, 30, STEP30)]
    for r in (0, 1):
        events += resumed(5.0, r, 1, 30, {0: "a30", 1: "b10"})
    assert mixed_resumes(run(*events), 2)[0] == ("attempt 1: shard 1 it read as step 30 holds what rank 1 wrote at "
                                                 "step 10 or 20")


def test_a_shard_of_a_step_whose_write_no_rank_recorded_is_judged_by_the_writes_there_are():
    """Rank 1 was killed after its shard of step 30 reached the disk, before it recorded the write; the shard read
    back as step 30 holds step 10's bytes."""
    events = [*saved(1.0, 10, STEP10), *saved(3.0, 30, {0: "a30"})]
    for r in (0, 1):
        events += resumed(5.0, r, 1, 30, {0: "a30", 1: "b10"})
    assert mixed_resumes(run(*events), 2)[1] == ("attempt 1: shard 1 it read as step 30 holds what rank 1 wrote at "
                                                 "step 10")


def test_the_shards_a_rank_read_from_other_steps_name_the_checkpoint_they_were_read_from():
    from train.judge.shards import foreign_shards

    events = run(*overwritten_in_place())
    assert foreign_shards(events, 1, 1, written(events)) == [
        {"shard": 0, "step": 10, "written_at": [30], "path": "m/ckpt"}]


def test_a_rank_that_resumed_from_another_step_and_read_another_steps_shard_is_told_both():
    events = [*saved(1.0, 10, STEP10), *saved(2.0, 20, STEP20), *saved(3.0, 30, STEP30)]
    events += resumed(5.0, 0, 1, 30, STEP30) + resumed(5.0, 1, 1, 20, {0: "a20", 1: "b10"})
    assert mixed_resumes(run(*events), 2)[1] == ("attempt 1: it resumed from step 20 while rank 0 resumed from step "
                                                 "30; shard 1 it read as step 20 holds what rank 1 wrote at step 10")


def test_a_rank_whose_peers_resumed_differently_from_each_other_is_told_each():
    events = [*saved(1.0, 10, {0: "a10", 1: "b10", 2: "c10"}), *saved(2.0, 30, {0: "a30", 1: "b30", 2: "c30"})]
    events += resumed(5.0, 0, 1, 30, {0: "a30", 1: "b30", 2: "c30"}) + resumed(5.0, 1, 1, None, {})
    events += resumed(5.0, 2, 1, 10, {0: "a10", 1: "b10", 2: "c10"})
    assert mixed_resumes(run(*events), 3)[0] == ("attempt 1: it resumed from step 30 while rank 1 started fresh, "
                                                 "rank 2 resumed from step 10")


def test_a_mix_in_a_restart_is_found_after_a_first_attempt_that_started_fresh():
    events = [*resumed(0.5, 0, 0, None, {}), *resumed(0.5, 1, 0, None, {})]
    events = [e for e in events if e[3] != "final"] + overwritten_in_place()  # attempt 0 fresh, read no shards
    assert sorted(mixed_resumes(run(*events), 2)) == [0, 1]


def test_a_rank_that_died_before_its_resume_is_not_weighed_and_its_peers_still_are():
    """Attempt 1: rank 0 read its shards and died before it recorded its resume."""
    died = [e for e in resumed(5.0, 0, 1, 30, {0: "a30", 1: "b10"}) if e[3] == "shard_read"]
    events = [*saved(1.0, 10, STEP10), *saved(3.0, 30, STEP30), *died]
    torn = events + resumed(5.0, 1, 1, 30, {0: "a30", 1: "b10"})
    assert mixed_resumes(run(*torn), 2) == {1: "attempt 1: shard 1 it read as step 30 holds what rank 1 wrote at "
                                               "step 10"}
    fresh = events + resumed(5.0, 1, 1, None, {})  # no peer said it resumed: a fresh start beside none
    assert mixed_resumes(run(*fresh), 2) == {}


def older_runs_tag():
    """A tag an older run left (DeepSpeed's `latest`): both ranks of attempt 0 resume from global_step10, whose
    shards no save of this run wrote, before this run's own saves of steps 20 and 30."""
    events = []
    for r in (0, 1):
        events += [e for e in resumed(0.5, r, 0, 10, {0: "old0", 1: "old1"}, path="m/global_step10") if e[3] != "final"]
    return events + [*saved(2.0, 20, {0: "a20", 1: "b20"}), *saved(3.0, 30, STEP30),
                     (4.0, 0, 0, "final", {"digest": "end"}), (4.0, 1, 0, "final", {"digest": "end"})]


def test_a_resume_from_a_checkpoint_this_run_never_wrote_is_stale_and_names_it():
    v = judge(run(*older_runs_tag()), 2).as_dict()
    assert v["verdict"] == "race", v["explanation"]
    assert [r["outcome"] for r in v["ranks"]] == ["stale", "stale"]
    assert ("rank 0 stale (attempt 0: it resumed from global_step10 (step 10), a checkpoint this run never wrote: no "
            "save of this run reached step 10 and none of the 2 shards it read holds a write of this run (a tag an "
            "older run left))") in v["explanation"]
    assert sorted(v["resume"]["never_written"]) == ["0", "1"]
    assert mixed_resumes(run(*older_runs_tag()), 2) == {}  # both read the same step: no mix


def test_a_resume_from_this_runs_own_save_or_a_fresh_start_was_written():
    own = [*saved(1.0, 10, STEP10)] + resumed(5.0, 0, 1, 10, STEP10) + resumed(5.0, 1, 1, 10, STEP10)
    assert never_written(run(*own)) == {}
    fresh = resumed(0.5, 0, 0, None, {}) + resumed(0.5, 1, 0, None, {})
    assert never_written(run(*fresh)) == {}


def test_a_step_this_run_saved_or_a_shard_it_wrote_is_not_another_runs():
    """Step 10 reached by this run (its save began) though the shards read back differ: mixed, not never written;
    and a shard of this run read back under a step no save named: not never written either."""
    reached = [*saved(1.0, 10, {0: "a10"}, commit=False)] + resumed(5.0, 0, 1, 10, {0: "x", 1: "y"})
    assert never_written(run(*reached)) == {}
    ours = [*saved(1.0, 10, STEP10)] + resumed(5.0, 0, 1, 40, {0: "a10", 1: "zz"})
    assert never_written(run(*ours)) == {}


def older_tag_then_own(older_step=10):
    """A resume whose attempts read different runs' shards: attempt 0 resumes both ranks from global_step10, a tag
    an older run left, saves step 20 and dies; attempt 1 resumes both from this run's step 20 and finishes."""
    events = []
    for r in (0, 1):
        events += [e for e in resumed(0.5, r, 0, older_step, {0: "old0", 1: "old1"},
                                      path=f"m/global_step{older_step}") if e[3] != "final"]
    events += saved(2.0, 20, {0: "a20", 1: "b20"})
    for r in (0, 1):
        events += resumed(5.0, r, 1, 20, {0: "a20", 1: "b20"}, path="m/global_step20")
    return events


def test_an_attempt_that_read_an_older_runs_tag_is_named_though_a_later_attempt_read_this_runs_own():
    """Attempt 0's reads alone decide attempt 0: attempt 1's shards, written by this run, do not vouch for them."""
    why = ("attempt 0: it resumed from global_step10 (step 10), a checkpoint this run never wrote: no save of this "
           "run reached step 10 and none of the 2 shards it read holds a write of this run (a tag an older run left)")
    assert never_written(run(*older_tag_then_own())) == {0: why, 1: why}
    v = judge(run(*older_tag_then_own()), 2).as_dict()
    assert v["verdict"] == "race", v["explanation"]
    assert [r["outcome"] for r in v["ranks"]] == ["stale", "stale"]
    assert v["resume"]["never_written"] == {"0": why, "1": why}


def test_only_the_attempt_that_read_an_older_runs_shards_is_named_and_the_last_such_attempt_is_said():
    """Attempt 0 started fresh and saved step 20; attempt 1 read an older run's global_step10 on rank 1 alone:
    rank 1 is named for attempt 1, rank 0 (this run's step 20 in attempt 1) is not. When both attempts read older
    runs' tags, the later attempt's is the one said."""
    events = resumed(0.5, 0, 0, None, {}) + resumed(0.5, 1, 0, None, {})
    events = [e for e in events if e[3] != "final"] + saved(2.0, 20, {0: "a20", 1: "b20"})
    events += resumed(5.0, 0, 1, 20, {0: "a20", 1: "b20"}, path="m/global_step20")
    events += resumed(5.0, 1, 1, 10, {0: "old0", 1: "old1"}, path="m/global_step10")
    assert list(never_written(run(*events))) == [1]
    assert never_written(run(*events))[1].startswith("attempt 1: it resumed from global_step10 (step 10)")
    twice = [e for e in older_tag_then_own(older_step=5) if e[2] == 0]
    for r in (0, 1):
        twice += resumed(5.0, r, 1, 10, {0: "old0", 1: "old1"}, path="m/global_step10")
    assert {r: why[:50] for r, why in never_written(run(*twice)).items()} == \
        {r: "attempt 1: it resumed from global_step10 (step 10)" for r in (0, 1)}


def test_a_rank_that_read_its_one_shard_of_an_older_runs_checkpoint_is_told_the_shard_holds_no_write_of_this_run():
    """Each rank reads its own part alone (Ray Train's rank_<r>.pt): one shard, said as one."""
    events = []
    for r in (0, 1):
        events += [e for e in resumed(0.5, r, 0, 10, {r: f"old{r}"}, path="m/global_step10") if e[3] != "final"]
    events += [*saved(2.0, 20, {0: "a20", 1: "b20"}), (4.0, 0, 0, "final", {"digest": "end"}),
               (4.0, 1, 0, "final", {"digest": "end"})]
    why = ("attempt 0: it resumed from global_step10 (step 10), a checkpoint this run never wrote: no save of this "
           "run reached step 10 and the shard it read holds no write of this run (a tag an older run left)")
    assert never_written(run(*events)) == {0: why, 1: why}
    v = judge(run(*events), 2).as_dict()
    assert [(r["outcome"], r["detail"]) for r in v["ranks"]] == [("stale", why), ("stale", why)]
    assert f"rank 1 stale ({why})" in v["explanation"]


@pytest.mark.parametrize("path, name", [("/work/runs/older/m/global_step10", "global_step10"),
                                        ("m/global_step10/", "global_step10"), ("global_step10", "global_step10"),
                                        ("m/run_X/", "run_X")])
def test_the_checkpoint_this_run_never_wrote_is_named_by_the_last_folder_of_its_path(path, name):
    """However the path is written (absolute, with a trailing slash, a bare name), the sentence names its last
    folder, whole."""
    events = []
    for r in (0, 1):
        events += resumed(0.5, r, 0, 10, {0: "old0", 1: "old1"}, path=path)
    why = (f"attempt 0: it resumed from {name} (step 10), a checkpoint this run never wrote: no save of this run "
           "reached step 10 and none of the 2 shards it read holds a write of this run (a tag an older run left)")
    assert never_written(run(*events)) == {0: why, 1: why}


def test_only_a_resume_names_the_checkpoint_never_written_not_the_other_records_of_its_attempt_that_name_a_file():
    """Attempt 0 resumed from an older run's tag and died as rank 1 was killed saving step 30 (its crash names that
    folder): the resume alone is weighed, and the kill is the attempt's end."""
    events = [*older_tag_then_own(), (2.5, 1, 0, "crash", {"at": "before_write", "epoch": 2,
                                                            "path": "m/global_step30"})]
    why = ("attempt 0: it resumed from global_step10 (step 10), a checkpoint this run never wrote: no save of this "
           "run reached step 10 and none of the 2 shards it read holds a write of this run (a tag an older run left)")
    assert never_written(run(*events)) == {0: why, 1: why}
    v = judge(run(*events), 2).as_dict()
    assert [(r["outcome"], r["detail"]) for r in v["ranks"]] == [("stale", why), ("stale", why)]
    assert v["resume"]["attempts"][0]["what"] == "rank 1 killed with SIGKILL before write (planted)"
