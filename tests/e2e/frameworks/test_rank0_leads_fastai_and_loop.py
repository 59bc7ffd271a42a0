"""fix=rank0_leads, the file users copy (issue 29), run by fastai and by the torch loop with real gloo ranks, on the
scenarios that are hardest for it (docs/fixes/fastai.md, docs/fixes/torch_loop.md have the whole matrix row):

- fastai (train/frameworks/fastai/rank0_leads.py): rank 0's last save fails (save_fails): every rank keeps rank 0's
  weights and says the save failed; no shared filesystem (no_shared_fs): only rank 0, which wrote the file, reads
  it; every process believes it is rank 0 (many_writers): only the process group's rank 0 writes.
- the torch loop (train/frameworks/torch_loop/rank0_leads.py): rank 0 killed halfway through a save
  (crash_mid_save), and killed after a save that the restarted rank 1's stale listing misses (resume_disagree):
  every rank resumes from rank 0's pick, the newest complete checkpoint.
Both sweeps side by side, one job each scenario (REPEATS 1): 4 minutes on the 2 shared cores (load average 20).
"""
import pytest
from conftest import sweep_groups

ENDS_WITHIN_S = 900  # a deadline against a hang, not the expected time: the machine may be shared

GROUPS = {
    "fastai": ["framework=fastai", "scenario=save_fails,no_shared_fs,many_writers"],
    "torch_loop": ["framework=torch_loop", "scenario=crash_mid_save,resume_disagree"],
}


@pytest.fixture(scope="module")
def groups(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("rank0_leads")
    return sweep_groups(root, GROUPS, "world_size=2", "fix=rank0_leads", deadline_s=ENDS_WITHIN_S)


def by_scenario(launch) -> dict:
    return {s["config"]["scenario"]: s for s, _ in launch.jobs()}


@pytest.mark.slow
def test_fastai_rank0_leads_holds_a_failed_save_node_local_disks_and_many_writers(groups):
    summaries = by_scenario(groups["fastai"])
    assert set(summaries) == {"save_fails", "no_shared_fs", "many_writers"}, groups["fastai"].out[-3000:]
    failed = summaries["save_fails"]
    assert failed["verdict"] == "save_failed", failed["explanation"]
    assert failed["replicas"] == "agree"
    for scenario in ("no_shared_fs", "many_writers"):
        assert summaries[scenario]["verdict"] == "clean", (scenario, summaries[scenario]["explanation"])


@pytest.mark.slow
def test_torch_loop_rank0_leads_resumes_every_rank_from_the_newest_complete_checkpoint(groups):
    summaries = by_scenario(groups["torch_loop"])
    assert set(summaries) == {"crash_mid_save", "resume_disagree"}, groups["torch_loop"].out[-3000:]
    for scenario, summary in summaries.items():
        resume = summary["resume"]
        assert summary["verdict"] == "clean" and summary["replicas"] == "agree", (scenario, summary["explanation"])
        assert resume["run"] == "finished" and resume["restarts"] == 1, (scenario, resume)  # the kill did happen
        for rank, resumes in resume["ranks"].items():
            assert resumes[-1]["attempt"] == 1 and resumes[-1]["steps_lost"] == 0, (scenario, rank, resumes)
