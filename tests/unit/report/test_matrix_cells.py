"""The counting behind the matrix and the report, from hand-made rows: each (scenario, fix) cell's runs,
race rate, dominant verdict and outcome, and n/a; the report's rows, groups and table; the console table.
What a cell's label says is left to the label's own tests (its wording may grow counts and intervals)."""
import json
import re

import pytest

from train.report.matrix import FIX_ORDER, FRAMEWORK_ORDER, SCENARIO_ORDER, _order, build, cell, cited
from train.report.matrix_files import scenario_references
from train.judge.vocabulary import OUTCOMES
from train.report.rates import share
from train.report.runs import CONFIGS, _median, aggregate, not_run_row, run_row
from train.report.run_records import NOT_RUN, find_runs, fix_name, read_not_run
from train.report.console import align, format_table
from train.report.files import write_json_atomic


def row(verdict="clean", scenario="seed", fix="barrier", replicas="agree", note="", **counts):
    """One report.csv row; counts: outcome=number of ranks (by default both ranks loaded when clean)."""
    if not counts and verdict == "clean":
        counts = {"loaded": 2}
    return {"scenario": scenario, "fix": fix, "verdict": verdict, "replicas": replicas, "note": note,
            "world_size": 2, "skew_s": 3.0, **{f"n_{o}": counts.get(o, 0) for o in OUTCOMES},
            "nonsaver_wait_s": "", "nonsaver_read_vs_save_end_s": ""}


def test_a_pair_that_was_not_run_is_na_with_its_reason():
    c = cell([row("n/a", note="n/a: torch.distributed.checkpoint writes its own files", replicas="")])
    assert c == {"runs": 0, "counted": 0, "races": 0, "race_rate": "", "ci_low": "", "ci_high": "", "not_counted": 0,
                 "not_counted_verdicts": "", "verdict": "n/a", "verdict_runs": 0, "outcome": "",
                 "replicas_diverged": "", "note": "n/a: torch.distributed.checkpoint writes its own files"}


def test_n_a_rows_beside_runs_do_not_count():
    c = cell([row("n/a", note="why"), row("race", missing=1, loaded=1), row("n/a", note="why")])
    assert (c["runs"], c["race_rate"], c["verdict"], c["note"]) == (1, 1.0, "race", "")


@pytest.mark.parametrize("verdicts, rate", [(["clean"], 0.0), (["race"], 1.0), (["race", "clean", "clean"], 0.333),
                                            (["race", "race", "clean"], 0.667), (["save_failed", "race"], 0.5),
                                            (["error", "interrupted", "crashed", "clean"], 0.0)])
def test_the_race_rate_is_the_share_of_runs_that_raced(verdicts, rate):
    rows = [row(v, loaded=2) for v in verdicts]
    c = cell(rows)
    assert (c["runs"], c["race_rate"]) == (len(verdicts), rate)


def test_the_dominant_verdict_is_the_commonest():
    assert cell([row("clean"), row("race", missing=1), row("race", missing=1)])["verdict"] == "race"
    assert cell([row("race", missing=1), row("clean"), row("clean")])["verdict"] == "clean"
    assert cell([row("save_failed", skipped=2)])["verdict"] == "save_failed"


def test_the_dominant_outcome_is_the_commonest_not_loaded_one_then_the_next():
    c = cell([row("race", loaded=1, missing=1), row("race", loaded=1, corrupt=1), row("race", loaded=1, missing=1)])
    assert c["outcome"] == "missing, corrupt"
    c = cell([row("race", loaded=1, timeout=1), row("race", skipped=1, timeout=1), row("race", skipped=1, stale=1)])
    assert c["outcome"] == "timeout, skipped"  # 2 and 2: the worse first; stale's 1 is third, left out
    assert cell([row("race", skipped=1, timeout=1)])["outcome"] == "timeout, skipped"
    assert cell([row("race", missing=2)])["outcome"] == "missing"
    assert cell([row("clean", loaded=2), row("clean", loaded=2)])["outcome"] == "loaded"  # nothing else happened
    assert cell([row("crashed")])["outcome"] == ""  # a job that crashed recorded no rank


def test_counts_read_back_from_the_csv_are_strings_and_count_the_same():
    as_csv = {k: str(v) for k, v in row("race", loaded=1, missing=1).items()}
    as_csv["n_stale"] = ""  # a crashed job's cells may be empty
    c = cell([as_csv, row("race", missing=2)])
    assert (c["runs"], c["race_rate"], c["outcome"]) == (2, 1.0, "missing")


def test_diverged_replicas_are_counted_per_run():
    rows = [row("race", replicas="diverged", loaded=1, skipped=1), row("race", replicas="agree", timeout=2),
            row("race", replicas="diverged", loaded=1, skipped=1), row("race", replicas="unknown", error=1)]
    assert cell(rows)["replicas_diverged"] == 2
    assert cell([row("clean")])["replicas_diverged"] == 0


def test_build_makes_one_cell_per_pair_in_the_readme_order():
    rows = [row("clean", scenario="torn", fix="atomic"), row("race", scenario="torn", fix="poll", corrupt=1),
            row("race", scenario="seed", fix="unsynced", missing=1),
            row("clean", scenario="torn", fix="atomic"),
            row("clean", scenario="mine", fix="zfix"), row("clean", scenario="alpha", fix="afix")]
    cells = build(rows)
    assert [(c["scenario"], c["fix"]) for c in cells] == [
        ("seed", "unsynced"), ("torn", "poll"), ("torn", "atomic"), ("alpha", "afix"), ("mine", "zfix")]
    assert [c["runs"] for c in cells] == [1, 1, 2, 1, 1]
    assert cells[0] == {"framework": "fastai", "scenario": "seed", "fix": "unsynced", **cell([rows[2]])}
    assert build([]) == []


def test_order_puts_known_names_first_then_the_rest_alphabetically():
    assert _order({"b", "torn", "seed", "a"}, SCENARIO_ORDER) == ["seed", "torn", "a", "b"]
    assert _order(set(FIX_ORDER), FIX_ORDER) == FIX_ORDER
    assert SCENARIO_ORDER[0] == "seed" and FIX_ORDER[0] == "as_shipped"


FRAMEWORK_REPOS = {"fastai": "fastai", "lightning": "lightning", "transformers": "transformers",
                   "accelerate": "accelerate"}  # a report in one of these repos is about that framework alone


def test_each_scenario_cites_the_reports_of_the_framework_shown_or_none(tmp_path):
    refs = scenario_references(CONFIGS)
    assert set(refs) == {p.stem for p in (CONFIGS / "scenario").glob("*.yaml")}
    assert cited(refs, "seed", "fastai") == "fastai#2393"
    assert cited(refs, "seed", "lightning") == ""  # fastai#2393 is fastai's, never Lightning's
    assert cited(refs, "disagree", "lightning") == "Lightning#5155"
    assert cited(refs, "disagree", "transformers") == "transformers#40923"
    assert cited(refs, "no_shared_fs", "lightning") == "Lightning#8599, Lightning#18812, DeepSpeed#2319"  # all's last
    assert cited(refs, "save_fails", "accelerate") == "pytorch#10577, Megatron-LM#367"
    for scenario, by in refs.items():
        assert set(by) <= {*FRAMEWORK_ORDER, "all"}, scenario
        for framework, reports in by.items():
            assert reports and all(re.fullmatch(r"[\w./-]+#\d+", r) for r in reports), (scenario, reports)
            for report in reports:  # a framework's own repo is cited for that framework alone
                about = FRAMEWORK_REPOS.get(report.split("#")[0].rsplit("/", 1)[-1].lower())
                assert about in (None, framework), (scenario, framework, report)
    (tmp_path / "scenario").mkdir()
    (tmp_path / "scenario/x.yaml").write_text("# @package _global_\n# fastai#1 in a comment is not cited\n"
                                              "reproduces:\n  all: [a#1, b#2]\n  fastai: [fastai#3, a#1]\n")
    (tmp_path / "scenario/y.yaml").write_text("# @package _global_\n# z#9\nskew:\n  seconds: 1\n")
    (tmp_path / "scenario/z.yaml").write_text("# @package _global_\n")
    refs = scenario_references(tmp_path)
    assert [cited(refs, "x", "fastai"), cited(refs, "x", "lightning")] == ["fastai#3, a#1, b#2", "a#1, b#2"]
    assert cited(refs, "y", "fastai") == cited(refs, "z", "fastai") == cited(refs, "nope", "fastai") == ""


# --- the report: a row per run, the groups, the table -----------------------------------------------------

def make_run(root, name, summary=None, events=(), hydra=None):
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / "events").mkdir()
    if summary is not None:
        (run / "summary.json").write_text(json.dumps(summary))
    for rank in {e["rank"] for e in events}:
        path = run / "events" / f"{'launcher' if rank == 'launcher' else f'rank{rank}'}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events if e["rank"] == rank))
    for key, text in (hydra or {}).items():
        (run / ".hydra" / key).write_text(text)
    return run


CFG = {"scenario": "torn", "fix": {"name": "poll"}, "skew": {"seconds": 0.0, "rank": 0}, "world_size": 2,
       "epochs": 3, "seed": 42, "repeat": 1}


def test_a_runs_row_counts_its_ranks_outcomes_and_its_non_savers_waits(tmp_path):
    ranks = [{"rank": 0, "outcome": "loaded", "timings": {"wait": 9.0, "load_after_save_end": 0.5}},
             {"rank": 1, "outcome": "corrupt", "timings": {"wait": 1.0, "load_after_save_end": -2.0}},
             {"rank": 2, "outcome": "corrupt", "timings": {"wait": 2.0}},
             {"rank": 3, "outcome": "loaded", "timings": {"load_after_save_end": -1.0}}]
    events = [{"t": 100.0, "rank": "launcher", "event": "launch_start"},
              {"t": 105.0, "rank": 1, "event": "save_end", "digest": "w"},  # the last save was rank 1's
              {"t": 107.12345, "rank": "launcher", "event": "launch_end", "status": "ok"}]
    run = make_run(tmp_path, "3-torn-poll", {"config": CFG, "status": "ok", "verdict": "race", "replicas": "diverged",
                                             "explanation": "race: x", "ranks": ranks}, events)
    r = run_row(tmp_path, run, events)
    assert r == {"job": "3-torn-poll", "scenario": "torn", "framework": "fastai", "fix": "poll", "skew_s": 0.0,
                 "skew_rank": 0,
                 "world_size": 2, "epochs": 3, "seed": 42, "repeat": 1, "status": "ok", "verdict": "race",
                 "replicas": "diverged", **{f"n_{o}": 0 for o in OUTCOMES}, "n_loaded": 2, "n_corrupt": 2,
                 "nonsaver_wait_s": 5.5, "nonsaver_read_vs_save_end_s": -0.25,
                 "wall_s": 7.123, "note": ""}


def test_a_rows_defaults_the_seed_scenario_no_saves_and_no_launch_end(tmp_path):
    ranks = [{"rank": 0, "outcome": "missing", "timings": {"wait": 3.0}},
             {"rank": 1, "outcome": "missing", "timings": {"wait": 1.0, "load_after_save_end": -1.0}}]
    cfg = {**CFG, "scenario": None}
    del cfg["repeat"]
    run = make_run(tmp_path, "r", {"config": cfg, "status": "ok", "verdict": "race", "replicas": "agree",
                                   "explanation": "x", "ranks": ranks})
    r = run_row(tmp_path, run, [{"t": 1.0, "rank": "launcher", "event": "launch_start"}])
    assert (r["scenario"], r["repeat"], r["nonsaver_wait_s"], r["nonsaver_read_vs_save_end_s"], r["wall_s"]) == \
        ("seed", 0, 1.0, -1.0, "")  # no save: rank 0 is the saver


def test_an_n_a_run_keeps_its_reason_and_a_crashed_one_is_reported_as_crashed(tmp_path):
    na = make_run(tmp_path, "0-torn-dcp", {"config": CFG, "status": "n/a", "verdict": "n/a",
                                           "explanation": "scenario=torn fix=dcp: n/a: why", "ranks": []})
    r = run_row(tmp_path, na, [])
    assert (r["verdict"], r["status"], r["note"], r["replicas"]) == ("n/a", "n/a",
                                                                     "scenario=torn fix=dcp: n/a: why", "")
    hydra = {"config.yaml": json.dumps(CFG), "hydra.yaml": json.dumps({"hydra": {"runtime": {"choices": {
        "scenario": "stale"}}}})}
    crashed = make_run(tmp_path, "1-crashed", hydra=hydra)
    r = run_row(tmp_path, crashed, [])
    assert (r["scenario"], r["fix"], r["status"], r["verdict"], r["replicas"], r["note"]) == \
        ("stale", "poll", "crashed", "crashed", "", "")
    assert all(r[f"n_{o}"] == 0 for o in OUTCOMES) and r["nonsaver_wait_s"] == ""
    no_choices = make_run(tmp_path, "2-crashed", hydra={"config.yaml": json.dumps(CFG)})
    assert run_row(tmp_path, no_choices, [])["scenario"] == "seed"


def test_a_job_left_out_as_n_a_has_the_row_its_run_had_but_no_job(tmp_path):
    """A sweep records the n/a jobs it does not launch in not_run.json (train/launch/cells.py): each row is the
    one its run's summary.json gave, its job empty; a record that is not one is not read, and no file is none."""
    assert read_not_run(tmp_path) == []
    torn = {"config": {**CFG, "fix": {"name": "dcp"}}, "status": "n/a", "verdict": "n/a",
            "explanation": "scenario=torn fix=dcp: n/a: why", "ranks": []}
    bare = {**torn, "config": {k: v for k, v in torn["config"].items() if k not in ("framework", "repeat")}}
    bare["config"]["scenario"] = None
    write_json_atomic(tmp_path / NOT_RUN, {"n/a": [torn, bare, {"status": "n/a", "verdict": "n/a", "config": {}},
                                                   "junk"]})
    assert read_not_run(tmp_path) == [torn, bare]
    for name, summary in (("0-torn-dcp", torn), ("1-seed-dcp", bare)):
        ran = run_row(tmp_path, make_run(tmp_path, name, summary), [])
        assert not_run_row(summary) == {**ran, "job": ""}
    assert (not_run_row(bare)["scenario"], not_run_row(bare)["framework"], not_run_row(bare)["repeat"]) == \
        ("seed", "fastai", 0)
    assert not_run_row({**torn, "config": {**CFG, "framework": {"name": "lightning"}}})["framework"] == "lightning"


def test_a_not_run_record_with_just_the_keys_the_report_reads_is_read(tmp_path):
    """config, status, verdict and explanation are all a row needs: a record with no other key is still one."""
    just = {"config": CFG, "status": "n/a", "verdict": "n/a", "explanation": "scenario=seed fix=barrier: n/a: why"}
    write_json_atomic(tmp_path / NOT_RUN, {"n/a": [just]})
    assert read_not_run(tmp_path) == [just]


def test_runs_are_found_in_job_order_and_a_nodes_own_dir_is_part_of_its_run(tmp_path):
    for name in ("10-b", "2-a", "x-named", "2-a/nodes/node0", "2-a/nodes/node1", "1-c", "e", "b", "d", "a"):
        (tmp_path / name / ".hydra").mkdir(parents=True)
    (tmp_path / "0-file").mkdir()
    (tmp_path / "0-file/.hydra").write_text("a file, not a run's folder")
    assert [p.name for p in find_runs(tmp_path)] == ["a", "b", "d", "e", "x-named", "1-c", "2-a", "10-b"]
    single = tmp_path / "1-c"
    assert find_runs(single) == [single]


def test_groups_per_point_count_runs_crashes_races_and_outcomes():
    rows = [row("race", fix="unsynced", missing=1, loaded=1) | {"nonsaver_wait_s": 1.0,
                                                                     "nonsaver_read_vs_save_end_s": -2.0},
            row("clean", fix="unsynced", loaded=2) | {"nonsaver_wait_s": 3.0, "nonsaver_read_vs_save_end_s": 1.0},
            row("clean", fix="unsynced", loaded=2) | {"nonsaver_wait_s": 4.0},
            row("crashed", fix="unsynced") | {"nonsaver_wait_s": 99.0},
            row("n/a", fix="dcp", note="why"),
            row("clean", fix="barrier") | {"skew_s": "0"},
            row("crashed", fix="poll")]
    groups = aggregate(rows)
    assert [(g["fix"], g["skew_s"]) for g in groups] == [("barrier", 0.0), ("poll", 3.0), ("unsynced", 3.0)]
    unsynced = groups[2]  # the crashed run is counted apart, not in the rate
    assert {k: unsynced[k] for k in ("runs", "counted", "races", "race_rate", "not_counted", "outcomes", "wait_s",
                                     "read_s")} == {"runs": 4, "counted": 3, "races": 1, "race_rate": 1 / 3,
                                                    "not_counted": "crashed 1", "outcomes": "loaded 5, missing 1",
                                                    "wait_s": 3.0, "read_s": -0.5}
    assert {k: groups[1][k] for k in ("runs", "counted", "race_rate", "not_counted", "outcomes")} == \
        {"runs": 1, "counted": 0, "race_rate": None, "not_counted": "crashed 1", "outcomes": ""}
    assert groups[0]["race_rate"] == 0.0 and groups[0]["skew_s"] == 0.0
    two_points = aggregate([row("clean", scenario="b"), row("clean", scenario="a"), row("race", missing=2) | {
        "skew_s": 1.0}, row("clean") | {"world_size": 3}])
    assert [(g["scenario"], g["world_size"], g["skew_s"]) for g in two_points] == [
        ("a", 2, 3.0), ("b", 2, 3.0), ("seed", 2, 1.0), ("seed", 3, 3.0)]


def test_a_share_rounds_its_interval_to_whole_percent():
    assert share(10, 10) == "10/10 (72–100%)"  # 72.2%: the low end, rounded
    assert share(3, 7) == "3/7 (16–75%)"


def test_the_median_is_rounded_and_empty_without_values():
    assert (_median([1.0, 2.0, 10.0]), _median([1.0, 2.0]), _median([0.12345]), _median([])) == (2.0, 1.5, 0.123, "")


def test_the_console_table_aligns_each_ranks_outcome_and_times():
    verdict = {"ranks": [{"rank": 0, "outcome": "loaded", "timings": {"load_attempt": 12.345, "load_after_save_end":
                                                                      0.1, "wait": 0}},
                         {"rank": 1, "outcome": "missing", "timings": {"load_attempt": 9.1,
                                                                       "load_after_save_end": -2.9}}]}
    assert format_table(verdict).splitlines() == [
        "rank  outcome  load at  vs save end  sync wait",
        "0     loaded   12.35 s  +0.10 s      0.00 s",
        "1     missing  9.10 s   -2.90 s      -"]
    assert align([["a", "bb", ""], ["ccc", "d", "e"]]) == "a    bb\nccc  d   e"


def test_json_is_written_whole_under_its_name(tmp_path):
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"b": 1, "a": [1, 2]})
    assert path.read_text() == '{\n  "b": 1,\n  "a": [\n    1,\n    2\n  ]\n}\n'
    write_json_atomic(path, {"again": True})
    assert json.loads(path.read_text()) == {"again": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]  # no temporary file left


def test_several_frameworks_give_a_grid_each_without_their_all_n_a_columns():
    from train.report.matrix import markdown

    rows = [row("race", scenario="seed", fix="unsynced", missing=1),
            {**row("clean", scenario="seed", fix="as_shipped"), "framework": "lightning"},
            {**row("n/a", scenario="seed", fix="unsynced", note="n/a: fastai v1's"), "framework": "lightning"}]
    cells = build(rows)
    assert [(c["framework"], c["fix"]) for c in cells] == [("fastai", "unsynced"), ("lightning", "as_shipped"),
                                                            ("lightning", "unsynced")]
    fastai, lightning = markdown(cells, {"seed": {"fastai": ["fastai#2393"], "all": ["x#1"]}}).split("\n\n### ")
    assert fastai.startswith("### fastai\n") and "| scenario (reproduces) | unsynced |" in fastai
    assert lightning.startswith("lightning\n")
    assert "| scenario (reproduces) | as_shipped |\n" in lightning  # its unsynced column is n/a all the way down
    assert "| **seed** (fastai#2393, x#1) |" in fastai and "| **seed** (x#1) |" in lightning  # each its own reports
    one = markdown([c for c in cells if c["framework"] == "lightning"], {})
    assert one.startswith("### lightning\n") and "| **seed** |" in one  # one framework is named too


def test_why_a_record_could_not_be_used_in_a_few_words():
    import json as json_module

    from train.report.run_records import unreadable

    try:
        json_module.loads('{"cut')
    except ValueError as e:
        assert unreadable(e) == "summary.json is not whole JSON"
    assert unreadable(FileNotFoundError(2, "No such file", "/x/.hydra/config.yaml")) == "no config.yaml"
    assert unreadable(FileNotFoundError()) == "no file"
    assert unreadable(KeyError("config")) == "KeyError: 'config'"


def test_a_runs_row_names_its_framework_and_a_record_without_one_is_fastai_s(tmp_path):
    summary = {"config": {**CFG, "framework": {"name": "lightning"}}, "status": "ok", "verdict": "clean",
               "ranks": []}  # just the four keys a record must have
    assert run_row(tmp_path, make_run(tmp_path, "0-torn-poll", summary), [])["framework"] == "lightning"
    older = {**summary, "config": CFG}  # a record from before there were frameworks
    assert run_row(tmp_path, make_run(tmp_path, "1-torn-poll", older), [])["framework"] == "fastai"


def test_a_summary_without_a_runs_record_is_read_as_none_and_its_run_as_crashed(tmp_path):
    from train.report.run_records import read_summary

    hydra = {"config.yaml": json.dumps(CFG)}
    cut = make_run(tmp_path, "0-cut", {"config": CFG, "status": "ok", "verdict": "clean"}, hydra=hydra)  # no ranks
    assert read_summary(cut) is None
    assert (run_row(tmp_path, cut, [])["verdict"], run_row(tmp_path, cut, [])["status"]) == ("crashed", "crashed")
    whole = make_run(tmp_path, "1-whole", {"config": CFG, "status": "ok", "verdict": "clean", "ranks": []})
    assert read_summary(whole) == {"config": CFG, "status": "ok", "verdict": "clean", "ranks": []}


def test_a_framework_whose_every_cell_is_n_a_still_shows_its_fixes():
    from train.report.matrix import fixes_shown

    cells = build([{**row("n/a", fix=fix, note="n/a: no seam"), "framework": "transformers"}
                   for fix in ("dcp", "barrier")])
    assert fixes_shown(cells) == ["barrier", "dcp"]  # all n/a: every column, each saying why


def test_a_long_reason_is_cut_to_its_first_80_characters():
    from train.report.run_records import unreadable

    assert unreadable(RuntimeError("x" * 100)) == "RuntimeError: " + "x" * 80


def test_a_group_names_its_fix_with_its_framework_where_that_is_not_fastai():
    groups = aggregate([row("clean", fix="barrier"), {**row("race", fix="as_shipped"), "framework": "lightning"},
                        {**row("clean", fix="barrier"), "framework": "fastai"}])
    assert sorted((g["fix"], g["runs"]) for g in groups) == [("barrier", 2), ("lightning:as_shipped", 1)]


def test_a_scenario_that_is_n_a_all_the_way_across_is_left_out_unless_every_one_is():
    from train.report.matrix import scenarios_shown

    cells = build([row("race", scenario="torn", fix="barrier", missing=1),
                   row("n/a", scenario="crash_mid_save", fix="barrier", note="a resume scenario"),
                   row("n/a", scenario="crash_mid_save", fix="atomic", note="a resume scenario"),
                   row("n/a", scenario="torn", fix="atomic", note="no seam")])
    assert scenarios_shown(cells) == ["torn"]
    all_na = [c for c in cells if c["verdict"] == "n/a"]
    assert scenarios_shown(all_na) == ["torn", "crash_mid_save"]  # all n/a: every row, each saying why


def test_a_runs_fix_is_read_under_its_name_now_or_under_its_old_one():
    assert fix_name({"fix": {"name": "barrier"}, "callback": {"name": "poll"}}) == "barrier"
    assert fix_name({"callback": {"name": "poll"}}) == "poll"  # a summary.json written before the rename
    assert fix_name({}) is None


def test_the_matrix_title_names_every_framework_its_cells_show():
    from train.report.matrix import title

    def cells(*names):
        return [{"framework": n} for n in names]

    assert title(cells("fastai")).endswith("in fastai: scenario (what goes wrong) x fix")
    assert "in fastai and lightning:" in title(cells("lightning", "fastai", "lightning"))
    assert "in fastai, lightning and transformers:" in title(cells("transformers", "lightning", "fastai"))
    assert "in no framework:" in title([])


def test_a_class_of_your_own_is_named_by_its_class_and_a_shipped_fix_by_its_name_alone():
    own = {"name": "own", "_target_": "examples.my_checkpoints.lightning_io.PatientCheckpointIO"}
    assert fix_name({"fix": own}) == "own (PatientCheckpointIO)"
    shipped = {"name": "barrier", "_target_": "train.frameworks.fastai.callbacks.BarrierSaveModelCallback"}
    assert fix_name({"fix": shipped}) == "barrier"


def test_the_grid_has_a_column_per_fix_a_row_per_scenario_with_the_reports_it_reproduces_here_and_a_blank_where_not_run():
    from train.report.matrix import grid

    cells = build([row("race", scenario="torn", fix="barrier", missing=1), row("clean", scenario="torn", fix="atomic"),
                   row("clean", scenario="seed", fix="atomic")])
    references = {"torn": {"fastai": ["fastai#2393"]}, "seed": {"lightning": ["x#1"]}}  # seed's is another framework's
    assert grid(cells, references, "fastai") == (
        "| scenario (reproduces) | barrier | atomic |\n"
        "| --- | --- | --- |\n"
        "| **seed** |  | **clean 1/1 (21–100%)** |\n"
        "| **torn** (fastai#2393) | **race 1/1 (21–100%)** (missing) | **clean 1/1 (21–100%)** |")


def test_configs_order_yaml_names_only_scenarios_fixes_and_frameworks_that_exist():
    """configs/order.yaml: a name that is not there (a typo, a removed file) would silently sort after the rest."""
    from train.frameworks.registry import names

    assert set(SCENARIO_ORDER) <= {p.stem for p in (CONFIGS / "scenario").glob("*.yaml")}
    assert set(FIX_ORDER) <= {p.stem for p in (CONFIGS / "fix").glob("*.yaml")}
    assert set(FRAMEWORK_ORDER) <= set(names())
    assert len(set(SCENARIO_ORDER)) == len(SCENARIO_ORDER) and len(set(FIX_ORDER)) == len(FIX_ORDER)
