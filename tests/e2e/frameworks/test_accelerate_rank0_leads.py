"""fix=rank0_leads for Accelerate (issue 29): train/frameworks/accelerate/rank0_leads.py is the file users copy, a
helper around save_state / load_state in which rank 0 decides and reads and every rank gets its decision and weights
(load_best), checkpoints are complete only once their marker is written last (save), and resume() loads rank 0's pick
of the newest complete one. (docs/fixes/accelerate.md shows that very file: tests/project/test_fixes_docs.py.)

On real gloo ranks (world_size=2), the hardest cells, every group side by side (slow: the node-local one starts two
node agents): a failed save is said on every rank, which all end on rank 0's weights (save_fails: save_failed),
node-local disks (no_shared_fs: clean, rank 1 never reads a file), ranks whose guard saw no file (disagree: clean,
no rank waits for a peer that went another way) and rank 0 killed halfway through a save (crash_mid_save: clean, the
restart resumes from the previous complete checkpoint). (resume_disagree is n/a for Accelerate.)
"""
import pytest
from conftest import sweep_groups

from train.events import read_events

ENDS_WITHIN_S = 400  # every group together; about two minutes on 2 idle cores

GROUPS = {
    "shared": ["scenario=save_fails,disagree"],
    "node_local": ["scenario=no_shared_fs"],
    "resume": ["scenario=crash_mid_save"],
}


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> dict:
    """scenario -> summary.json, every group started together."""
    root = tmp_path_factory.mktemp("accelerate_rank0_leads")
    launches = sweep_groups(root, GROUPS, "world_size=2", "framework=accelerate", "fix=rank0_leads",
                            deadline_s=ENDS_WITHIN_S)
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
    assert all("rank 0's save failed (best: OSError" in r["detail"] for r in failed["ranks"]), failed["ranks"]
    assert len({r["final_digest"] for r in failed["ranks"]}) == 1  # every rank holds rank 0's weights

    node_local = cells["no_shared_fs"]
    assert (node_local["verdict"], node_local["replicas"]) == ("clean", "agree"), node_local["explanation"]
    events = read_events(node_local["run_dir"])
    reads = [e for e in events if e["event"] == "load_attempt"]
    assert [e["rank"] for e in reads if e.get("path")] == [0]  # rank 0 read; rank 1 was sent the weights
    assert [e.get("source") for e in reads if e["rank"] == 1] == ["broadcast from rank 0"]

    guarded = cells["disagree"]
    assert (guarded["verdict"], guarded["replicas"]) == ("clean", "agree"), guarded["explanation"]

    crashed = cells["crash_mid_save"]
    assert (crashed["verdict"], crashed["resume"]["run"], crashed["resume"]["restarts"]) == ("clean", "finished", 1), \
        crashed["explanation"]
    last = [ranks[-1] for ranks in crashed["resume"]["ranks"].values()]
    assert len({r["step"] for r in last}) == 1 and all(r["steps_lost"] == 0 and r["path"] for r in last), last
