"""train/faults.py's async points on one real gloo rank in this process: async_exit_pending's slow write of rank 0's
shard lasts until the loop waits for that save or the rank has left (its process group destroyed), not a fixed
time, so that the naive loop ends with the save pending however long its end takes on a loaded machine."""
import threading
import time

from helpers.gloo import one_rank
from helpers.recorded import Events
from train import faults
from train.faults import Faults

HELD_S = 0.5  # ten times the write's own time below: a write of a fixed time would have ended by then


def exit_pending(events) -> Faults:
    cfg = {"skew": {}, "fault": {"async_fault": "exit_pending", "kill_epoch": 2}, "epochs": 3,
           "timeout": {"collective_s": 20}}
    return Faults(cfg, events, print)


def rank0_writes_its_shard(points: Faults) -> threading.Thread:
    """The save's thread at the last epoch's shard (epoch 2, rank 0), as ShardWriter.write_data calls it."""
    thread = threading.Thread(target=points.async_before_shard, args=(2, 0), daemon=True)
    thread.start()
    return thread


def test_the_slow_write_holds_until_the_loop_waits_for_that_save(tmp_path, monkeypatch):
    monkeypatch.setattr(faults, "EXIT_PENDING_S", 0.05)
    events = Events()
    with one_rank(tmp_path):
        points = exit_pending(events)
        write = rank0_writes_its_shard(points)
        points.async_awaited(1)  # the loop waits for an earlier save: not this one
        time.sleep(HELD_S)
        assert write.is_alive() and not events.of("slow_write_end")
        points.async_awaited(2)
        write.join(5)
    assert not write.is_alive()
    assert [e["until"] for e in events.of("slow_write_end")] == ["awaited"]


def test_the_slow_write_of_a_loop_that_never_waits_ends_once_the_rank_has_left(tmp_path, monkeypatch):
    monkeypatch.setattr(faults, "EXIT_PENDING_S", 0.05)
    events = Events()
    with one_rank(tmp_path):
        write = rank0_writes_its_shard(exit_pending(events))
        time.sleep(HELD_S)
        assert write.is_alive()
    write.join(5)  # one_rank's end destroyed the process group: the rank has left
    assert not write.is_alive()
    assert [e["until"] for e in events.of("slow_write_end")] == ["rank_left"]
