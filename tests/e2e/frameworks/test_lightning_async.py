"""Lightning's AsyncCheckpointIO with ModelCheckpoint(save_top_k=1) (issue 27, scenario=async_top_k, Lightning#14035):
real gloo ranks (world_size=2), Lightning 2.6 as shipped, a real SIGKILL and torch elastic's own restart. At epoch 1's
save rank 0's write takes 4 s (fault.slow_write_s) and rank 0 is killed once that save has returned.

- as shipped: Lightning removed epoch 0's complete checkpoint before epoch 1's was written; the kill leaves no
  checkpoint, and the restart starts over: stale, 10 steps redone, never clean;
- fix=on_durable (train/fixes.remove_when_durable): the removal waits for the write; the restart resumes from
  epoch 1's checkpoint: clean;
- the same kill with synchronous saves (checkpoint.async_save=false, the control): clean.
Two sweeps side by side, shared by the assertions. And a Ctrl-C while AsyncCheckpointIO holds a pending write leaves
no rank, thread or process behind.
"""
import pytest

from conftest import sweep_groups
from train.events import read_events

ENDS_WITHIN_S = 300  # three runs of about 25 s each on 2 idle cores, in two sweeps side by side

GROUPS = {
    "async": ["scenario=async_top_k", "fix=as_shipped,on_durable"],
    "sync": ["scenario=async_top_k", "fix=as_shipped", "checkpoint.async_save=false"],
}


@pytest.fixture(scope="module")
def groups(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("lightning_async")
    return sweep_groups(root, GROUPS, "world_size=2", "framework=lightning", deadline_s=ENDS_WITHIN_S)


def by_fix(launch) -> dict:
    return {s["config"]["fix"]["name"]: (s, read_events(job)) for s, job in launch.jobs()}


def first_attempt(events, name, **fields) -> list:
    return [e for e in events if e["event"] == name and e["attempt"] == 0 and e["rank"] == 0
            and all(e.get(k) == v for k, v in fields.items())]


@pytest.mark.slow
def test_as_shipped_the_old_best_goes_before_the_new_one_lands_and_the_restart_starts_over(groups):
    summary, events = by_fix(groups["async"])["as_shipped"]
    assert summary["verdict"] == "race", summary["explanation"]
    assert [r["outcome"] for r in summary["ranks"]] == ["stale", "stale"], summary["explanation"]
    assert "the newest complete checkpoint was step 10: 10 steps redone" in summary["explanation"]
    saved = first_attempt(events, "save_end", epoch=0)  # epoch 0's checkpoint was complete
    assert len(saved) == 1 and saved[0]["dispatched_t"] <= saved[0]["durable_t"]
    dispatched = first_attempt(events, "save_dispatch", epoch=1)
    removed = first_attempt(events, "rotate", path=saved[0]["path"])
    crash = first_attempt(events, "crash")
    assert dispatched and removed and crash and crash[0]["at"] == "after_save"
    assert dispatched[0]["t"] < removed[0]["t"] < crash[0]["t"]  # removed while epoch 1's write was in flight
    assert not first_attempt(events, "save_end", epoch=1)  # which never landed
    restarted = [e for e in events if e["event"] == "resume" and e["attempt"] == 1]
    assert len(restarted) == 2 and all(e["path"] is None and e["step"] == 0 for e in restarted)  # nothing to resume


@pytest.mark.slow
def test_on_durable_removes_the_old_best_once_the_new_one_landed_and_the_restart_resumes_from_it(groups):
    summary, events = by_fix(groups["async"])["on_durable"]
    assert summary["verdict"] == "clean", summary["explanation"]
    landed = first_attempt(events, "save_end", epoch=1)
    removed = first_attempt(events, "rotate", path=first_attempt(events, "save_end", epoch=0)[0]["path"])
    assert landed and removed and landed[0]["durable_t"] <= removed[0]["t"]
    assert landed[0]["durable_t"] - landed[0]["dispatched_t"] >= 4.0  # the slow write, waited for
    assert {r[-1]["step"] for r in summary["resume"]["ranks"].values()} == {20}  # epoch 1's, the newest complete


@pytest.mark.slow
def test_the_same_kill_with_synchronous_saves_is_clean(groups):
    summary, events = by_fix(groups["sync"])["as_shipped"]
    assert summary["config"]["checkpoint"]["async_save"] is False
    assert summary["verdict"] == "clean", summary["explanation"]
    assert not [e for e in events if e["event"] in ("save_dispatch", "slow_write_start")]
    assert {r[-1]["step"] for r in summary["resume"]["ranks"].values()} == {20}



@pytest.mark.slow
def test_ctrl_c_while_asynccheckpointio_holds_a_pending_write_leaves_no_rank_thread_or_process(tmp_path):
    """Epoch 1's write stalls 4 s in AsyncCheckpointIO's thread (slow_write; the planted kill moved to mid_write, past
    the stall); a Ctrl-C 0.2 s into the stall finds it pending. Every rank stops at once, the write never ends, and no
    process is left (the executor's thread does not hold the rank's exit)."""
    from helpers.interrupts import assert_stopped_at_once, events_below, interrupt

    run_dir = tmp_path / "run"

    def pending(events):
        return [e for e in events if e["rank"] == 0 and e["event"] == "slow_write_start"]

    rc, took, sent, out = interrupt(run_dir, [f"hydra.run.dir={run_dir}", "world_size=2", "framework=lightning",
                                              "scenario=async_top_k", "fault.kill_at=mid_write"], after=0.2,
                                    when=pending)
    events = events_below(run_dir)
    assert not [e for e in events if e["event"] == "crash"], "rank 0 was killed before the signal came"
    assert not [e for e in events if e["event"] == "save_end" and e["epoch"] == 1]  # never durable
    assert_stopped_at_once(run_dir, rc, took, sent, out)


class Recorded:
    def __init__(self):
        self.events = []

    def record(self, name, **fields):
        self.events.append((name, fields.get("how")))


def test_remove_when_durable_waits_for_the_writes_then_removes_and_keeps_the_old_one_when_a_write_failed(
        tmp_path):
    from train.fixes import SyncFailed, remove_when_durable

    events, done = Recorded(), []
    remove_when_durable(events, lambda: done.append("waited"), lambda: done.append("removed"))
    assert done == ["waited", "removed"]
    assert [name for name, _ in events.events] == ["sync_enter", "sync_exit"] and events.events[0][1] == "writes"

    def failed():
        raise OSError(28, "No space left on device")  # what teardown() raises for a write that failed

    import torch.distributed as dist

    events, done = Recorded(), []
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)  # say() names the rank
    try:
        with pytest.raises(SyncFailed):
            remove_when_durable(events, failed, lambda: done.append("removed"))
    finally:
        dist.destroy_process_group()
    assert done == [] and [name for name, _ in events.events] == ["sync_enter", "sync_error"]
