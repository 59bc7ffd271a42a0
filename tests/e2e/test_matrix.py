"""The scenario x fix matrix, end to end: `make matrix` runs every scenario against every fix with real
gloo ranks, and every cell it shows is asserted here."""
import csv
import json
import subprocess

import pytest
from PIL import Image

from conftest import ROOT, processes_tagged, tagged_env
from helpers.matrix_expected import EXPECTED, FIXES, NA, REPEATS, C, R
from train.bench.measure import default_jobs

@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("matrix") / "sweep"
    proc = subprocess.run(["make", "-s", "matrix", f"DIR={sweep}", f"REPEATS={REPEATS}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800, env=tagged_env(str(sweep)))
    return proc, sweep


def summaries(sweep):
    """(scenario, fix) -> each job's summary.json, and the record of each job left out as n/a (not_run.json)."""
    from train.report.run_records import read_not_run

    out = {}
    for s in [json.loads(path.read_text()) for path in sweep.glob("*/summary.json")] + read_not_run(sweep):
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

    # n/a pairs are recorded with their reason, and never launched: no job dir
    s = runs[("torn", "dcp")]
    assert s["status"] == "n/a" and "torch.distributed.checkpoint writes its own files" in s["explanation"]
    assert not any("torn-dcp" in p.name for p in sweep.iterdir())


def test_a_sweep_composes_one_config_a_row_and_leaves_its_n_a_jobs_out(tmp_path):
    """train/launch/cells.py: the jobs of a row differ only in fix=NAME and repeat=N; one composed config decides
    them all, each fix's node read from its file."""
    from hydra import compose, initialize_config_dir

    from train.launch.cells import split_jobs

    composed = []

    def count(overrides):
        composed.append(list(overrides))
        return compose(config_name="train", overrides=[*overrides, *resolved_sweep_dir(tmp_path)],
                       return_hydra_config=True)
    jobs = [[f"scenario={s}", f"fix={f}", f"repeat={r}"] for s in ("seed", "torn") for f in ("dcp", "barrier")
            for r in range(3)]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        run, left_out = split_jobs(jobs, count)
    assert composed == [["scenario=seed", "fix=dcp", "repeat=0"], ["scenario=torn", "fix=dcp", "repeat=0"]]
    assert run == [j for j in jobs if j[:2] != ["scenario=torn", "fix=dcp"]]
    assert [s["overrides"] for s in left_out] == [["scenario=torn", "fix=dcp", f"repeat={r}"] for r in range(3)]
    assert [s["config"]["repeat"] for s in left_out] == [0, 1, 2]
    assert {s["explanation"] for s in left_out} == {"scenario=torn fix=dcp: n/a: torch.distributed.checkpoint writes "
                                                    "its own files; the stall is placed in the torch.save path"}
    assert (left_out[0]["status"], left_out[0]["verdict"], left_out[0]["ranks"]) == ("n/a", "n/a", [])


def resolved_sweep_dir(tmp_path) -> list:
    """The sweep dir as the sweeper has it when it splits the jobs: a folder already made. The default's
    ${fresh:...} resolver is registered by a job's process (train/launch/folders.py), not here, and would make a
    folder under runs/ (in a test alone it did not resolve, and every job was composed whole)."""
    return [f"hydra.sweep.dir={tmp_path}"]


def test_what_a_row_decides_is_what_each_job_composed_whole_decides(tmp_path):
    """Every fix (but own) of a load-best and a resume row: the same jobs left out, with the same lines, as when
    each job's config is composed whole, as its job composes it."""
    from hydra import compose, initialize_config_dir

    from train.launch.cells import composed, decide, split_jobs
    from train.launch.defaults import options

    jobs = [[f"scenario={scenario}", f"fix={fix}", f"framework={framework}", "repeat=0"]
            for scenario, framework in (("seed", "fastai"), ("crash_mid_save", "torch_loop"))
            for fix in options("fix") if fix != "own"]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        def whole(job):
            return compose(config_name="train", overrides=[*job, *resolved_sweep_dir(tmp_path)],
                           return_hydra_config=True)
        _, left_out = split_jobs(jobs, whole)
        each = {tuple(job): decide(composed(whole(job))) for job in jobs}
    assert {tuple(s["overrides"]): s["explanation"] for s in left_out} == {j: why for j, why in each.items() if why}
    assert len(left_out) > 10 and len(left_out) < len(jobs) - 5  # both kinds, in both rows


def test_an_n_a_cell_launches_no_job_yet_the_matrix_gives_its_reason(tmp_path):
    """make matrix over torn x (unsynced, dcp): torn x dcp is n/a; its 2 jobs are never launched (no job dir,
    no job line), and its cell is in matrix.csv and matrix.html with the reason a job of it gave before."""
    sweep = tmp_path / "sweep"
    proc = subprocess.run(["make", "-s", "matrix", f"DIR={sweep}", "SCENARIOS=torn", "FIXES=unsynced,dcp", "REPEATS=2",
                           "ARGS=launch.job_lines=true"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=tagged_env(str(sweep)))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not processes_tagged(str(sweep))
    assert f"[sweep] 2 jobs into {sweep}, {default_jobs()} at a time; 2 n/a jobs left out, not run (not_run.json)" \
        in proc.stdout
    jobs = [line for line in proc.stdout.splitlines() if line.startswith("[sweep] job ")]
    assert len(jobs) == 2 and all("fix=unsynced" in line for line in jobs)
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and p.name != ".jobs") == \
        ["0-fastai-torn-unsynced-skew0.0-ws2-r0", "1-fastai-torn-unsynced-skew0.0-ws2-r1"]
    why = ("scenario=torn fix=dcp: n/a: torch.distributed.checkpoint writes its own files; the stall is placed in "
           "the torch.save path")
    with open(sweep / "matrix.csv", newline="") as f:
        cells = {r["fix"]: r for r in csv.DictReader(f)}
    assert (cells["dcp"]["verdict"], cells["dcp"]["runs"], cells["dcp"]["note"]) == ("n/a", "0", why)
    assert cells["unsynced"]["runs"] == "2" and cells["unsynced"]["verdict"] != "n/a"
    with open(sweep / "report.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["fix"] == "dcp"]
    assert [(r["job"], r["verdict"], r["repeat"], r["note"]) for r in rows] == [("", "n/a", k, why) for k in "01"]
    assert json.dumps(why)[1:-1] in (sweep / "matrix.html").read_text()
