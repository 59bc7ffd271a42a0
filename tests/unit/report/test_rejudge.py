"""python -m train.report --rejudge: a recorded run judged again from its events with today's judge."""
import json

from train.events import EventLog
from train.report.rejudge import rejudge


def test_a_run_judged_with_an_older_judge_gets_todays_verdict(tmp_path):
    """The run's events say rank 1 loaded epoch 0's file before rank 0's last save began (which then failed): a
    stale read. Its summary.json, written by an older judge, said clean."""
    run = tmp_path / "0-accelerate-save_fails-atomic"
    (run / ".hydra").mkdir(parents=True)
    for rank in (0, 1):
        log = EventLog(run, rank)
        log.record("rank_start", pid=1, world_size=2)
        if rank == 0:
            log.record("save_start", epoch=0, path="m.pth")
            log.record("save_end", epoch=0, path="m.pth", digest="d0")
        log.close()
    stale = json.loads(json.dumps({"verdict": "clean", "status": "ok", "ranks": [], "explanation": "old",
                                   "config": {"world_size": 2, "scenario": "save_fails",
                                              "framework": {"name": "accelerate"}}}))
    (run / "summary.json").write_text(json.dumps(stale))
    changed = rejudge(tmp_path)
    after = json.loads((run / "summary.json").read_text())
    assert after["config"] == stale["config"]
    assert after["verdict"] != "clean" and changed == [(run, "clean", after["verdict"])]
