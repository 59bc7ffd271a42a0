"""DeepSpeed as a framework (issue 26), framework=deepspeed: deepspeed.initialize with ZeRO on real gloo ranks
(world_size=2), save_checkpoint every epoch and load_checkpoint(dir), which reads `latest`, at every attempt
torch elastic makes (train/frameworks/deepspeed/). What it shows:

- node-local disks, as shipped (scenario=node_local_resume): two elastic agents on one host, each node its own
  disk; rank 0 is killed after epoch 1's save and torch elastic restarts both nodes: rank 1 finds no `latest` and
  starts fresh while rank 0 resumes. Both exit 0; the verdict is not clean and names rank 1 (mixed: it started
  fresh beside a peer that resumed). Both ranks of the restart hold attempt 1, whichever way each node's agent
  counted it (train/rank/worker.py agree_on_attempt; tests/unit/rank/test_attempt.py).
- shard_lost, as shipped: rank 1 is killed before its ZeRO partition lands, `latest` already naming the checkpoint
  (rank 0 writes it without waiting for the other shards): every restart dies on the missing shard. agreed: the
  ranks load the newest tag all of them hold whole (epoch 0's): clean.
- node-local disks with fix=node_local_storage (DeepSpeed's checkpoint.use_node_local_storage and rank 0's tag,
  checked whole on every disk): both ranks resume from step 20, clean.
- crash_mid_save with the kill after the save (a ZeRO-1 save and resume, no fault in the checkpoint): clean.
- stale_tag, as shipped: an older run (another seed) left its checkpoint and `latest` in the folder; both ranks
  resume from it with no error, and the verdict names the checkpoint this run never wrote (stale). manifest (a
  manifest naming the run, written last): both ranks start fresh, clean.
- ZeRO-3 (framework.zero_stage=3): shard_lost as shipped races, agreed is clean, every rank's model partition on disk.
- (slow) 5 runs each of the two clean cells: clean 5/5; shard_lost with atomic (the tag written last): clean.
deepspeed_shm_comm, the op every deepspeed.initialize on the CPU accelerator loads, is built by make install
(tools/install-lock.sh), so no run here compiles it.
"""
from pathlib import Path

import pytest

from conftest import side_by_side, sweep_command, train_command
from helpers.compose import composed
from train.judge.shards import mixed_resumes
from train.launch.plan import not_applicable

ENDS_WITHIN_S = 600  # every group together

GROUPS = {
    "shard_lost": ["scenario=shard_lost", "fix=as_shipped,agreed"],
    "resume": ["scenario=crash_mid_save", "fault.kill_at=after_save", "fix=as_shipped"],
    "stale_tag": ["scenario=stale_tag", "fix=as_shipped,manifest"],
    "zero3": ["scenario=shard_lost", "framework.zero_stage=3", "fix=as_shipped,agreed"],
}
SLOW_GROUPS = {  # one more run of each clean cell: with the first group's, 2 of 2 (docs/measured/ holds the 5 of 5)
    "agreed": ["scenario=shard_lost", "fix=agreed", "repeat=1"],
    "resume": ["scenario=crash_mid_save", "fault.kill_at=after_save", "fix=as_shipped", "repeat=1"],
    "atomic": ["scenario=shard_lost", "fix=atomic"],
}


def launch(root: Path, groups: dict, node_local: bool = False) -> dict:
    commands = {name: sweep_command(root / name, "world_size=2", "framework=deepspeed", *argv)
                for name, argv in groups.items()}
    if node_local:  # the scenario as shipped: a kill, and torch elastic's restart of both nodes
        commands["node_local"] = (train_command(root / "node_local" / "run", "world_size=2", "framework=deepspeed",
                                                "scenario=node_local_resume"), root / "node_local")
        commands["node_local_fixed"] = (train_command(root / "node_local_fixed" / "run", "world_size=2",
                                                      "framework=deepspeed", "scenario=node_local_resume",
                                                      "fix=node_local_storage"), root / "node_local_fixed")
    return side_by_side(root, commands, ENDS_WITHIN_S)


@pytest.fixture(scope="module")
def groups(tmp_path_factory) -> dict:
    return launch(tmp_path_factory.mktemp("deepspeed"), GROUPS, node_local=True)


def by_fix(launch) -> dict:
    return {s["config"]["fix"]["name"]: (s, job) for s, job in launch.jobs()}


def events_of(job_dir: Path) -> list:
    from train.events import read_events
    return read_events(job_dir)


@pytest.mark.slow  # real DeepSpeed ranks (the `groups` fixture): make test-fast leaves them out
def test_node_local_disks_as_shipped_is_not_clean_and_names_the_rank_that_started_fresh(groups):
    [(summary, job)] = groups["node_local"].jobs()
    assert summary["verdict"] == "race", summary["explanation"]
    assert summary["resume"]["restarts"] == 1, summary["explanation"]
    ranks = {r["rank"]: r for r in summary["ranks"]}
    assert ranks[1]["outcome"] == "mixed", summary["explanation"]
    assert "rank 1 mixed (attempt 1: it started fresh while rank 0 resumed from step 20)" in summary["explanation"], \
        summary["explanation"]
    events = events_of(job)
    assert [(e["rank"], e["attempt"], e["at"]) for e in events if e["event"] == "crash"] == [(0, 0, "after_save")]
    starts = sorted((e["rank"], e["attempt"]) for e in events if e["event"] == "rank_start")
    assert starts == [(0, 0), (0, 1), (1, 0), (1, 1)]  # one attempt number per restart, on both nodes
    resumed = {e["rank"]: e["path"] is None for e in events if e["event"] == "resume" and e["attempt"] == 1}
    assert resumed == {0: False, 1: True}  # rank 1's disk has no `latest`
    assert {e["rank"] for e in events if e["event"] == "train_end"} == {0, 1}  # both finished
    # no rank raised in the restart (in attempt 0 rank 1 may have, on the collective its killed peer broke)
    assert not [e for e in events if e["event"] in ("load_error", "train_error") and e["attempt"] == 1]


@pytest.mark.slow  # real DeepSpeed ranks (the `groups` fixture): make test-fast leaves them out
def test_node_local_disks_with_node_local_storage_resume_every_rank_from_the_newest(groups):
    """fix=node_local_storage: each node's own disk holds the model file and its rank's shard, rank 0 reads the
    tag: after the restart both ranks resume from step 20, clean."""
    [(summary, job)] = groups["node_local_fixed"].jobs()
    assert summary["verdict"] == "clean", summary["explanation"]
    resumed = {e["rank"]: e["step"] for e in events_of(job) if e["event"] == "resume" and e["attempt"] == 1}
    assert resumed == {0: 20, 1: 20}, summary["explanation"]


@pytest.mark.slow  # real DeepSpeed ranks (the `groups` fixture): make test-fast leaves them out
def test_latest_before_the_shards_as_shipped_dies_on_the_missing_shard_and_agreed_is_clean(groups):
    fixes = by_fix(groups["shard_lost"])
    naive, job = fixes["as_shipped"]
    assert naive["verdict"] == "race" and naive["resume"]["run"] in ("out_of_restarts", "crash_loop"), \
        naive["explanation"]
    events = events_of(job)
    crash = next(e for e in events if e["event"] == "crash")
    assert (crash["rank"], crash["at"], crash["attempt"]) == (1, "before_shard", 0)
    errors = [e for e in events if e["event"] == "load_error"]
    assert errors and {e["error_type"] for e in errors} == {"FileNotFoundError"}, errors
    assert {Path(e["path"]).name for e in errors} == {"global_step20"} or len({Path(e["path"]).name
                                                                                for e in errors}) == 1
    fixed, job = fixes["agreed"]
    assert fixed["verdict"] == "clean", fixed["explanation"]
    last = {r: resumes[-1] for r, resumes in fixed["resume"]["ranks"].items()}
    assert {Path(r["path"]).name for r in last.values()} == {"global_step10"}  # epoch 0's: the newest whole one
    assert any(e["event"] == "crash" for e in events_of(job))  # the kill did happen


@pytest.mark.slow  # real DeepSpeed ranks (the `groups` fixture): make test-fast leaves them out
def test_zero_3_partitions_the_model_file_too_and_the_same_race_and_fix_hold(groups):
    """framework.zero_stage=3: each rank writes its own model-states partition; shard_lost as shipped races (every
    restart dies on the missing partition) and agreed resumes both ranks from step 10."""
    fixes = by_fix(groups["zero3"])
    naive, job = fixes["as_shipped"]
    assert naive["verdict"] == "race" and naive["config"]["framework"]["zero_stage"] == 3, naive["explanation"]
    assert [e["at"] for e in events_of(job) if e["event"] == "crash"] == ["before_shard"], naive["explanation"]
    fixed, job = fixes["agreed"]
    assert fixed["verdict"] == "clean", fixed["explanation"]
    assert {e["rank"]: e["step"] for e in events_of(job) if e["event"] == "resume" and e["attempt"] == 1} == \
        {0: 10, 1: 10}, fixed["explanation"]
    assert sorted(p.name for p in (job / "models" / "global_step10").glob("zero_pp_rank_*_model_states.pt")) == [
        "zero_pp_rank_0_mp_rank_00_model_states.pt", "zero_pp_rank_1_mp_rank_00_model_states.pt"]


@pytest.mark.slow  # real DeepSpeed ranks (the `groups` fixture): make test-fast leaves them out
def test_a_zero_1_save_and_resume_is_clean(groups):
    summary, job = by_fix(groups["resume"])["as_shipped"]
    assert summary["verdict"] == "clean", summary["explanation"]
    assert summary["config"]["framework"]["zero_stage"] == 1
    assert summary["resume"]["restarts"] == 1
    events = events_of(job)
    reads = [e for e in events if e["event"] == "shard_read"]
    writes = {(e["step"], e["shard"]): e["digest"] for e in events if e["event"] == "shard_write"}
    assert {e["shard"] for e in reads} == {0, 1}
    assert all(writes[(e["step"], e["shard"])] == e["digest"] for e in reads)  # each read the shard written


def test_cells_that_do_not_apply_say_why():
    def reason(scenario, fix="as_shipped"):
        return not_applicable(composed("framework=deepspeed", f"scenario={scenario}", f"fix={fix}")) or ""
    assert "resumes only" in reason("seed")
    assert "node_local_resume" in reason("no_shared_fs")
    assert "shard_lost" in reason("pointer_first")
    assert "lists no folder" in reason("resume_disagree")
    assert "stale_tag" in reason("stale")
    assert not reason("stale_tag", "manifest") and not reason("crash_mid_save", "manifest")


@pytest.mark.slow  # real DeepSpeed ranks (the `groups` fixture): make test-fast leaves them out
def test_a_tag_an_older_run_left_is_resumed_silently_as_shipped_and_named_and_the_manifest_is_clean(groups):
    fixes = by_fix(groups["stale_tag"])
    naive, job = fixes["as_shipped"]
    assert naive["verdict"] == "race", naive["explanation"]
    assert [r["outcome"] for r in naive["ranks"]] == ["stale", "stale"], naive["explanation"]
    assert ("rank 1 stale (attempt 0: it resumed from global_step10 (step 10), a checkpoint this run never wrote"
            in naive["explanation"]), naive["explanation"]
    events = events_of(job)
    assert {e["rank"]: e["step"] for e in events if e["event"] == "resume"} == {0: 10, 1: 10}
    assert not [e for e in events if e["event"] in ("load_error", "train_error", "crash")]  # no error anywhere
    assert {e["rank"] for e in events if e["event"] == "train_end"} == {0, 1}
    assert 10 not in {e["step"] for e in events if e["event"] == "shard_write"}  # this run saved steps 20 and 30
    fixed, job = fixes["manifest"]
    assert fixed["verdict"] == "clean", fixed["explanation"]
    events = events_of(job)
    assert {e["rank"]: e["path"] for e in events if e["event"] == "resume"} == {0: None, 1: None}  # both fresh
    assert {e["step"] for e in events if e["event"] == "shard_write"} == {10, 20, 30}


def test_a_rank_that_found_no_latest_beside_one_that_read_both_shards_is_mixed():
    """DeepSpeed's shape, hand-made: ZeRO-1/2's load reads every rank's partition, so rank 0 read shards 0 and 1
    of step 20; rank 1 found no `latest` (its node's disk) and started fresh."""
    events = [{"t": 1.0, "rank": r, "attempt": 0, "event": "shard_write", "step": 20, "shard": r, "digest": f"s{r}"}
              for r in (0, 1)]
    events += [{"t": 5.0, "rank": 0, "attempt": 1, "event": "shard_read", "step": 20, "shard": s,
                "digest": f"s{s}", "path": "d/global_step20"} for s in (0, 1)]
    events += [{"t": 6.0, "rank": 0, "attempt": 1, "event": "resume", "step": 20, "path": "d/global_step20"},
               {"t": 6.0, "rank": 1, "attempt": 1, "event": "resume", "step": 0, "path": None}]
    why = mixed_resumes(events, 2)
    assert why[1] == "attempt 1: it started fresh while rank 0 resumed from step 20"
    assert why[0] == "attempt 1: it resumed from step 20 while rank 1 started fresh"


@pytest.fixture(scope="module")
def slow_groups(tmp_path_factory) -> dict:
    return launch(tmp_path_factory.mktemp("deepspeed_slow"), SLOW_GROUPS)


@pytest.mark.slow
def test_the_clean_cells_are_clean_twice_and_the_tag_written_last_is_clean(groups, slow_groups):
    for name, first in (("agreed", "shard_lost"), ("resume", "resume")):
        runs = [s for s, _ in slow_groups[name].jobs()] + [by_fix(groups[first])[name == "agreed" and "agreed"
                                                                                   or "as_shipped"][0]]
        assert [s["verdict"] for s in runs] == ["clean"] * 2, (name, [s["explanation"] for s in runs])
    atomic, _ = by_fix(slow_groups["atomic"])["atomic"]
    assert atomic["verdict"] == "clean", atomic["explanation"]
