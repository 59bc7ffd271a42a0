"""fix=rank0_leads for Lightning (issue 29): train/frameworks/lightning/rank0_leads.py is the file users copy, a
TorchCheckpointIO where rank 0 decides and reads and every rank gets its decision and checkpoint, plus
rank0_last_checkpoint for fit(ckpt_path=...) (docs/fixes/lightning.md shows it: tests/project/test_fixes_docs.py).

On real gloo ranks (world_size=2), the hardest cells, every group side by side (slow: the node-local one starts two
node agents): a failed save is said on every rank and no rank waits for it (save_fails: save_failed), node-local
disks (no_shared_fs: clean, rank 1 never reads a file) and ranks whose listings differ after a restart
(resume_disagree: clean, every rank resumes from rank 0's choice).
"""
from pathlib import Path

import pytest
from conftest import sweep_groups

from train.events import read_events

ENDS_WITHIN_S = 600  # every group together; about two minutes on 2 idle cores, six under a load of 18

GROUPS = {
    "shared": ["scenario=save_fails"],
    "node_local": ["scenario=no_shared_fs"],
    "resume": ["scenario=resume_disagree"],
}


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("lightning_rank0_leads")
    tmp = root / "tmp"  # fsspec's temporary files, apart from other tests'
    tmp.mkdir()
    launches = sweep_groups(root, GROUPS, "world_size=2", "framework=lightning", "fix=rank0_leads",
                            deadline_s=ENDS_WITHIN_S, env={"TMPDIR": str(tmp)})
    out = {}
    for launch in launches.values():
        assert launch.rc == 0 and not launch.hung, launch.out[-3000:]
        out.update({scenario: summary for (scenario, _), summary in launch.summaries().items()})
    return out


@pytest.mark.slow
def test_rank0_leads_holds_the_hardest_cells(cells):
    failed = cells["save_fails"]
    assert (failed["verdict"], [r["outcome"] for r in failed["ranks"]]) == ("save_failed", ["skipped", "skipped"]), \
        failed["explanation"]
    said = "rank 0's save failed (OSError: [Errno 28] No space left on device): best.ckpt is not whole"
    assert {r["detail"] for r in failed["ranks"]} == {said}
    assert len({r["final_digest"] for r in failed["ranks"]}) == 1

    node_local = cells["no_shared_fs"]
    assert (node_local["verdict"], node_local["replicas"]) == ("clean", "agree"), node_local["explanation"]
    assert node_local["node_disk"] == "mount"  # each node's agent had its own tmpfs on checkpoint.dir
    events = read_events(node_local["run_dir"])
    assert [e["bytes"] for e in events if e["event"] == "load_attempt" and e["rank"] == 1] == [None]  # no file there

    resumed = cells["resume_disagree"]
    assert (resumed["verdict"], resumed["replicas"]) == ("clean", "agree"), resumed["explanation"]
    assert resumed["resume"]["restarts"] == 1, resumed["resume"]
    last = {rank: resumes[-1] for rank, resumes in resumed["resume"]["ranks"].items()}
    assert len({Path(r["path"]).name for r in last.values()}) == 1 and all(r["steps_lost"] == 0 for r in last.values())
