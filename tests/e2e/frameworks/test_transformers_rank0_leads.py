"""fix=rank0_leads for the Trainer (issue 29): train/frameworks/transformers/rank0_leads.py is the file users copy, a
Trainer subclass in which rank 0 decides and reads and every rank gets its decision and weights, checkpoints are
complete only once their marker is written last, and train(resume_from_checkpoint=True) resumes from rank 0's pick
of the newest complete one. (docs/fixes/transformers.md shows that very file: tests/project/test_fixes_docs.py.)

On real gloo ranks (world_size=2), the hardest cells, every group side by side (slow: the node-local one starts two
node agents): a failed save is said on every rank, which all end on rank 0's weights (save_fails: save_failed),
node-local disks (no_shared_fs: clean, rank 1 never reads a file), rank 0 killed halfway through a save
(crash_mid_save: clean, the restart resumes from the previous complete checkpoint) and ranks whose listings differ
after a restart (resume_disagree: clean, every rank resumes from rank 0's pick).
"""
import pytest
from conftest import sweep_groups

from train.events import read_events

ENDS_WITHIN_S = 400  # every group together; about two minutes on 2 idle cores

GROUPS = {
    "shared": ["scenario=save_fails"],
    "node_local": ["scenario=no_shared_fs"],
    "resume": ["scenario=crash_mid_save,resume_disagree"],
}


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> dict:
    """scenario -> summary.json, every group started together."""
    root = tmp_path_factory.mktemp("transformers_rank0_leads")
    launches = sweep_groups(root, GROUPS, "world_size=2", "framework=transformers", "fix=rank0_leads",
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
    assert all("rank 0's save failed (checkpoint-" in r["detail"] for r in failed["ranks"]), failed["ranks"]
    assert len({r["final_digest"] for r in failed["ranks"]}) == 1  # every rank holds rank 0's weights

    node_local = cells["no_shared_fs"]
    assert (node_local["verdict"], node_local["replicas"]) == ("clean", "agree"), node_local["explanation"]
    events = read_events(node_local["run_dir"])
    reads = [e for e in events if e["event"] == "load_attempt"]
    assert [e["rank"] for e in reads if e.get("path")] == [0]  # rank 0 read; rank 1 was sent the weights
    done = {e["rank"]: e for e in events if e["event"] == "load_done"}  # seen from what each rank holds at the end
    assert done[0]["from_disk"] and done[1]["from_disk"] is False and done[1]["digest"] == done[0]["digest"]

    for scenario in ("crash_mid_save", "resume_disagree"):
        s = cells[scenario]
        assert (s["verdict"], s["resume"]["run"]) == ("clean", "finished"), f"{scenario}: {s['explanation']}"
        last = [ranks[-1] for ranks in s["resume"]["ranks"].values()]
        assert len({r["step"] for r in last}) == 1 and all(r["steps_lost"] == 0 for r in last), last
