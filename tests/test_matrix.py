"""The scenario x fix matrix, end to end: `make matrix` runs every scenario against every fix with real
gloo ranks, and every cell it shows is asserted here."""
import csv
import json
import subprocess

import pytest
from PIL import Image

from conftest import ROOT, processes_tagged, tagged_env

R, C, SF, NA = "race", "clean", "save_failed", "n/a"
FIXES = ["unsynced", "barrier", "poll", "atomic", "agreed", "broadcast", "dcp", "save_on_each_node", "rank0_leads"]
# make matrix's default is 5 repeats a cell; here 1, so the 72 cells fit the test's time on 2 cores
REPEATS = 1
# scenario -> one (verdict, dominant outcomes) per fix, in FIXES' order
EXPECTED = {
    "seed": [(R, "missing"), (C, ""), (C, ""), (C, ""), (C, ""), (C, ""), (C, ""), (C, ""), (C, "")],
    "stale": [(R, "stale"), (C, ""), (R, "stale"), (R, "stale"), (C, ""), (C, ""), (C, ""), (C, ""), (C, "")],
    "torn": [(R, "corrupt"), (C, ""), (R, "corrupt"), (C, ""), (C, ""), (C, ""), (NA, ""), (C, ""), (C, "")],
    "skip_if_missing": [(R, "skipped"), (R, "hung, skipped"), (C, ""), (C, ""), (C, ""), (R, "hung, skipped"),
                        (C, ""), (R, "hung, skipped"), (C, "")],
    "disagree": [(R, "skipped"), (R, "hung, skipped"), (R, "skipped"), (R, "skipped"), (C, ""),
                 (R, "hung, skipped"), (C, ""), (R, "hung, skipped"), (C, "")],
    "save_fails": [(R, "corrupt, missing"), (R, "corrupt"), (R, "corrupt"), (R, "timeout"), (SF, "skipped"),
                   (R, "corrupt"), (NA, ""), (R, "corrupt"), (SF, "skipped")],
    "many_writers": [(R, "corrupt"), (R, "corrupt"), (R, "corrupt"), (C, ""), (C, ""), (C, ""), (C, ""),
                     (R, "corrupt"), (C, "")],
    "no_shared_fs": [(R, "missing"), (R, "missing"), (R, "timeout"), (R, "timeout"), (R, "missing"), (C, ""), (NA, ""),
                     (C, ""), (C, "")],
}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("matrix") / "sweep"
    proc = subprocess.run(["make", "-s", "matrix", f"DIR={sweep}", f"REPEATS={REPEATS}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800, env=tagged_env(str(sweep)))
    return proc, sweep


def summaries(sweep):
    out = {}
    for path in sweep.glob("*/summary.json"):
        s = json.loads(path.read_text())
        out[(s["config"]["scenario"], s["config"]["fix"]["name"])] = s
    return out


@pytest.mark.slow
def test_make_matrix_gives_every_cell_and_leaves_nothing_running(matrix):
    proc, sweep = matrix
    assert proc.returncode == 0, proc.stderr[-3000:]  # n/a pairs are not failures
    assert not processes_tagged(str(sweep))
    with open(sweep / "matrix.csv", newline="") as f:
        cells = {(r["scenario"], r["fix"]): r for r in csv.DictReader(f)}
    assert {pair for pair in cells if pair[0] in EXPECTED and pair[1] in FIXES} == \
        {(scenario, fix) for scenario in EXPECTED for fix in FIXES}
    others = {pair: cell["verdict"] for pair, cell in cells.items() if pair[0] not in EXPECTED or pair[1] not in FIXES}
    assert others and set(others.values()) == {"n/a"}, others  # other frameworks' fixes, the resume loop's scenarios
    assert not any(fix == "own" for _, fix in cells)  # a class of your own is not part of make matrix
    for scenario, row in EXPECTED.items():
        for fix, (verdict, outcome) in zip(FIXES, row):
            cell = cells[(scenario, fix)]
            assert (cell["verdict"], cell["outcome"] if verdict != C else "") == (verdict, outcome), \
                f"{scenario} x {fix}: {cell}"
            if verdict == C:
                assert cell["outcome"] == "loaded"
            if verdict != NA:  # every repeat gave the cell's verdict, and every run counted
                n = str(REPEATS)
                assert (cell["runs"], cell["counted"], cell["not_counted"], cell["verdict_runs"]) == (n, n, "0", n)
                assert (cell["races"], cell["race_rate"]) == ((n, "1.0") if verdict == R else ("0", "0.0"))

    md = (sweep / "matrix.md").read_text()
    assert f"**race {REPEATS}/{REPEATS} (" in md and f"**clean {REPEATS}/{REPEATS} (" in md
    assert md.startswith("# Scenario x fix: fastai (") and "### fastai\n" in md  # the framework is named
    assert "| **seed** (fastai#2393) |" in md and "| **save_fails** (pytorch#10577, Megatron-LM#367) |" in md
    assert "| **disagree** |" in md and "| **torn** |" in md and "**n/a**" in md  # other frameworks' reports: none
    png = sweep / "matrix.png"
    with Image.open(png) as im:
        im.verify()
        assert im.size[0] > 800 and im.size[1] > 400


@pytest.mark.slow
def test_matrix_cells_say_what_each_rank_ended_with(matrix):
    _, sweep = matrix
    runs = summaries(sweep)

    # skip_if_missing: the rank that skipped keeps its own weights; rank 0 loaded the best (epoch 0)
    s = runs[("skip_if_missing", "unsynced")]
    assert [r["outcome"] for r in s["ranks"]] == ["loaded", "skipped"]
    assert s["replicas"] == "diverged" and s["ranks"][0]["final_digest"] != s["ranks"][1]["final_digest"]
    assert "the replicas diverged" in s["explanation"]
    assert runs[("skip_if_missing", "agreed")]["replicas"] == "agree"

    # disagree: the guarded barrier's hang is named at once (train/toolkit/hang.py), with where rank 1 went; no wait
    # ran to the timeout
    s = runs[("disagree", "barrier")]
    rank0 = s["ranks"][0]
    assert (s["verdict"], rank0["outcome"]) == ("race", "hung")
    assert rank0["detail"] == "its barrier could never end: rank 1 skipped the load and went on to the end of the " \
                              "run without entering it"
    from train.events import read_events
    assert not any(e.get("timed_out") for e in read_events(s["run_dir"]))

    # save_fails: agreed says so, and every rank ends with the same weights
    s = runs[("save_fails", "agreed")]
    assert s["verdict"] == "save_failed" and s["replicas"] == "agree"
    assert len({r["final_digest"] for r in s["ranks"]}) == 1
    assert "rank 0's save failed (OSError: [Errno 28] No space left on device)" in s["explanation"]
    barrier = runs[("save_fails", "barrier")]
    assert barrier["verdict"] == "race"
    assert max(r["timings"].get("rank_end", 0) for r in barrier["ranks"]) < \
        barrier["config"]["timeout"]["collective_s"] + 30

    # many_writers: every process wrote, because each believed it was rank 0
    written = [json.loads(line) for line in (sweep.glob("*-many_writers-unsynced-*/events/rank1.jsonl").__next__())
               .read_text().splitlines()]
    assert any(e["event"] == "save_end" for e in written)

    # no_shared_fs: node 1's disk never had the file; rank 0 reading and sending it holds
    s = runs[("no_shared_fs", "barrier")]
    assert [r["outcome"] for r in s["ranks"]] == ["loaded", "missing"]
    assert sorted(p.name for p in (sweep / next(p.name for p in sweep.iterdir() if "no_shared_fs-barrier" in p.name)
                                   / "nodes").iterdir()) == ["node0", "node1"]
    assert runs[("no_shared_fs", "broadcast")]["replicas"] == "agree"

    # n/a pairs are recorded with their reason, not run
    s = runs[("torn", "dcp")]
    assert s["status"] == "n/a" and "torch.distributed.checkpoint writes its own files" in s["explanation"]
    assert not (sweep / next(p.name for p in sweep.iterdir() if "torn-dcp" in p.name) / "events").exists()
