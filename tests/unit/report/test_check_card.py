"""race-lab check's card (train/report/check_card.py) from hand-made plans and summaries: how each row is counted,
and the two rules for a scenario with no way to run, kept apart (docs/check.md):
  - a built-in fix (fix=<name>): n/a for that fix counts against it (raced), even as the only row not held;
  - a class of yours (fix=own): the scenario is `not checked`, neither held nor raced; the check is safe on the rest
    unless check.strict=true.
Issue 43: the first rule, alone among held rows, was in no test."""
import textwrap

from train.report.check_card import card, fitted, fix_docs, gist, last_line, markdown, not_checkable, result, row_result

MEASURED = {"seed": {"as_shipped": (5, 0, 0), "rank0_leads": (5, 0, 0), "broadcast": (5, 0, 0)},
            "save_fails": {"rank0_leads": (5, 0, 0), "broadcast": (5, 5, 0)},
            "torn": {"rank0_leads": (5, 0, 0), "atomic": (5, 0, 0)}}


def summary(verdict, explanation=""):
    return {"verdict": verdict, "explanation": explanation}


def plan(fix="as_shipped", cannot=None, strict=False, **extra):
    """Lightning's three load-best scenarios; `cannot`: scenario -> why this fix has no way to run it."""
    cannot = cannot or {}
    return {"framework": "lightning", "fix": fix, "class": "mine.Keeper" if fix == "own" else None, "repeats": 2,
            "world_size": 2, "setup": {"disks": "any", "restarts": True}, "left_out": [], "strict": strict,
            "scenarios": [{"name": n, "workload": "load_best", "cannot": cannot.get(n)}
                          for n in ("seed", "save_fails", "torn")], **extra}


HELD = {"seed": [summary("clean", "every rank loaded")] * 2, "save_fails": [summary("save_failed")] * 2,
        "torn": [summary("clean")] * 2}


def held_but(scenario):
    return {k: v for k, v in HELD.items() if k != scenario}


def test_a_built_in_fix_with_one_na_scenario_and_every_other_row_held_is_unsafe():
    """fix=broadcast (built in) has no way to run torn: that single n/a row counts against it, so the check is
    unsafe though seed and save_fails held; the card says so and names the fix that holds all three."""
    checked = result(plan("broadcast", {"torn": "broadcast has no torn file to read"}), held_but("torn"), MEASURED)
    rows = {r["name"]: r for r in checked["scenarios"]}
    assert [rows[n]["verdict"] for n in ("seed", "save_fails")] == ["held", "held"]
    assert rows["torn"]["verdict"] == "raced"
    assert rows["torn"]["explanation"] == "not held: n/a for this fix (broadcast has no torn file to read)"
    assert (rows["torn"]["counted"], rows["torn"]["races"], rows["torn"]["ci_low"], rows["torn"]["ci_high"]) == \
        (0, 0, 0.0, 1.0)
    assert rows["torn"]["holds_with"] == ["rank0_leads", "atomic"]
    assert row_result(rows["torn"]) == "n/a: counts as raced"
    assert checked["verdict"] == "unsafe" and checked["errors"] == []
    assert checked["recommended"] == "rank0_leads" and checked["fix_docs"] == "docs/fixes/lightning.md"
    assert last_line(checked) == ("unsafe: raced in 1 of 3 (torn); the change that holds all 3: fix=rank0_leads "
                                  "(docs/fixes/lightning.md)")
    assert "holds with: rank0_leads, atomic" in card(checked)


def test_the_same_scenario_your_class_cannot_run_is_not_checked_and_the_check_is_safe_on_the_rest():
    """fix=own with the same single unrunnable scenario: not checked, not counted; safe on the 2 checked, unless
    check.strict=true, which fails the check on it (and then recommends a fix that holds all three)."""
    why = "a fix of the resume"
    checked = result(plan("own", {"torn": why}), held_but("torn"), MEASURED)
    rows = {r["name"]: r for r in checked["scenarios"]}
    assert rows["torn"]["verdict"] == "not_checked" and rows["torn"]["explanation"] == f"not checked: {why}"
    assert row_result(rows["torn"]) == "not checked"
    assert checked["verdict"] == "safe" and checked["recommended"] == "own" and checked["fix_docs"] == \
        "docs/frameworks.md"
    assert last_line(checked) == (
        "safe on the 2 checked; 1 not checkable (torn: a fix of the resume; a shipped fix of this framework checks "
        "them; check.strict=true fails the check on them)")
    assert "holds with" not in card(checked)  # nothing raced
    strict = result(plan("own", {"torn": why}, strict=True), held_but("torn"), MEASURED)
    assert strict["verdict"] == "unsafe" and strict["strict"] is True and strict["recommended"] == "rank0_leads"
    assert last_line(strict) == ("unsafe: held the 2 checked; 1 not checkable (torn: a fix of the resume; a shipped "
                                 "fix of this framework checks them; check.strict=true: they fail the check)")


def test_a_check_that_held_every_scenario_is_safe_and_names_its_own_fix():
    checked = result(plan("broadcast"), HELD, MEASURED)
    assert checked["verdict"] == "safe" and checked["recommended"] == "broadcast"
    assert [r["verdict"] for r in checked["scenarios"]] == ["held", "held", "held"]
    assert last_line(checked) == "safe: held all 3 scenarios"
    assert not_checkable(checked["scenarios"], False) == ""


def test_a_row_counts_its_runs_races_and_interval_and_shows_the_raced_runs_explanation():
    runs = {**HELD, "save_fails": [summary("race", "rank 0's save failed"), summary("save_failed", "said"),
                                   summary("race", "rank 0's save failed"), summary("error", "harness")]}
    checked = result(plan(), runs, MEASURED)
    row = {r["name"]: r for r in checked["scenarios"]}["save_fails"]
    assert (row["verdict"], row["counted"], row["races"], row["not_counted"]) == ("raced", 3, 2, 1)
    assert (row["ci_low"], row["ci_high"]) == (0.208, 0.939)
    assert row["explanation"] == "rank 0's save failed" and row["holds_with"] == ["rank0_leads"]
    assert row_result(row) == "raced: race 2/3 (21–94%)"
    assert checked["verdict"] == "unsafe" and checked["errors"] == []
    assert last_line(checked) == ("unsafe: raced in 1 of 3 (save_fails); the change that holds all 3: "
                                  "fix=rank0_leads (docs/fixes/lightning.md)")
    seed = {r["name"]: r for r in checked["scenarios"]}["seed"]
    assert row_result(seed) == "held: race 0/2 (0–66%)" and seed["explanation"] == "every rank loaded"


def test_a_scenario_whose_runs_did_not_count_is_an_error_not_a_race_and_none_held_is_an_error_too():
    """A held scenario with one run whose harness failed has no verdict; so has one with no run at all."""
    one_failed = {**HELD, "seed": [summary("clean"), summary("crashed", "the harness died")]}
    checked = result(plan(), one_failed, MEASURED)
    row = {r["name"]: r for r in checked["scenarios"]}["seed"]
    assert (row["verdict"], row["counted"], row["not_counted"]) == ("error", 1, 1)
    assert checked["verdict"] == "error" and checked["errors"] == ["seed"]
    assert row_result(row) == "no verdict (1 run(s) failed)"
    assert last_line(checked) == ("error: no verdict for seed: the harness failed there (their runs' logs say why); "
                                  "not a race")
    none = result(plan(), {**HELD, "torn": [summary("error", "the harness died")] * 2}, MEASURED)
    row = {r["name"]: r for r in none["scenarios"]}["torn"]
    assert (row["verdict"], row["counted"], row["ci_low"], row["ci_high"]) == ("error", 0, 0.0, 1.0)
    assert row["explanation"] == "the harness died" and none["errors"] == ["torn"]
    assert result(plan(), held_but("torn"), MEASURED)["errors"] == ["torn"]  # no runs at all


def test_a_race_with_no_fix_measured_to_hold_all_says_so_and_a_race_beside_an_unchecked_row_counts_the_checked():
    raced = {**HELD, "torn": [summary("race", "rank 1 read a partly written checkpoint")] * 2}
    checked = result(plan(), raced, {"seed": MEASURED["seed"]})
    assert checked["recommended"] is None and checked["fix_docs"] is None
    assert last_line(checked) == "unsafe: raced in 1 of 3 (torn); no fix measured for lightning holds all 3"
    assert "holds with: none measured" in card(checked)
    resume = plan("own", {"seed": "a fix of the load of the best"})
    resume["scenarios"] = [{**s, "workload": "resume"} if s["name"] == "seed" else s for s in resume["scenarios"]]
    mine = result(resume, raced, MEASURED)
    assert mine["verdict"] == "unsafe"
    assert last_line(mine) == (
        "unsafe: raced in 1 of 2 checked (torn); 1 not checkable (seed: a fix of the load of the best; if your jobs "
        "never restart, check.restarts=false leaves them out; check.strict=true fails the check on them); the change "
        "that holds all 3: fix=rank0_leads (docs/fixes/lightning.md)")


def test_the_card_has_a_header_a_line_per_scenario_what_was_left_out_and_the_last_line():
    checked = result(plan("broadcast", {"torn": "no torn file"}, left_out=[{"name": "many_writers", "why": "never"}]),
                     held_but("torn"), MEASURED)
    assert card(checked).splitlines() == [
        "race-lab check: framework=lightning fix=broadcast, 2 run(s) of each scenario, 2 ranks",
        "  seed        load_best  held: race 0/2 (0–66%)      every rank loaded",
        "  save_fails  load_best  held: race 0/2 (0–66%)      ",
        "  torn        load_best  n/a: counts as raced        not held: n/a for this fix (no torn file)",
        "                         holds with: rank0_leads, atomic",
        "  left out 1 (why: check.md): many_writers",
        *textwrap.wrap(last_line(checked), 120, subsequent_indent="  ", break_on_hyphens=False)]
    mine = result(plan("own"), HELD, MEASURED)
    assert card(mine).splitlines()[0] == ("race-lab check: framework=lightning fix=own (mine.Keeper), 2 run(s) of "
                                          "each scenario, 2 ranks")


def test_the_card_sends_the_reader_to_the_page_of_the_fix_it_names():
    assert fix_docs("transformers", "rank0_leads") == "docs/fixes/transformers.md"
    assert fix_docs("deepspeed", "agreed") == "docs/frameworks.md"
    assert fix_docs("torch_loop", "durable", "async") == "docs/fixes/torch_loop-durable.md"  # a file to copy
    assert fix_docs("torch_loop", "on_durable", "async") == "docs/async.md"
    assert fix_docs("lightning", None) is None and fix_docs("lightning", None, "async") is None
    async_plan = plan(setup={"saves": "async"})
    assert result(async_plan, {**HELD, "torn": [summary("race")]}, MEASURED)["fix_docs"] == "docs/async.md"


def test_a_line_is_cut_to_the_width_with_an_ellipsis_and_a_sentence_to_its_first_clause():
    assert fitted("abcdef", 6) == "abcdef" and fitted("abcdef", 5) == "abcd…" and fitted("ab  cdef", 4) == "ab…"
    assert fitted("abc", 0) == "…"
    assert gist("race: rank 1 missing; rank 0 timed out") == "race: rank 1 missing"
    assert gist("clean: every rank loaded it. The trap it avoided: a stall") == "clean: every rank loaded it"
    assert gist("clean: the file. Then; more") == "clean: the file. Then"


def test_the_card_fits_a_screen_and_check_md_keeps_every_sentence():
    """A row per scenario with the gist of what happened, each line within the width; the whole sentence and the
    left-out reasons in check.md."""
    long = "race: rank 1 tried to load (FileNotFoundError) " + "x" * 300 + "; rank 0 timed out after 30 s"
    checked = result(plan(left_out=[{"name": "many_writers", "why": "cannot happen"},
                                    {"name": "cleanup", "why": "no restarts"}]),
                     {**HELD, "seed": [summary("race", long)] * 2}, MEASURED)
    lines = card(checked, 80).splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert lines[1] == fitted("  seed        load_best  raced: race 2/2 (34–100%)   " + long.split("; ")[0], 80)
    assert lines[1].endswith("…") and len(lines[1]) == 80
    assert lines[2] == "                         holds with: rank0_leads, as_shipped, broadcast"
    assert "  left out 2 (why: check.md): many_writers, cleanup" in lines
    assert "rank 0 timed out" not in card(checked, 80) and long in markdown(checked)
    assert "- many_writers: cannot happen" in markdown(checked)
    assert lines[-2:] == textwrap.wrap(last_line(checked), 80, subsequent_indent="  ", break_on_hyphens=False)
    assert card(checked).splitlines()[0] == card(checked, 120).splitlines()[0]  # 120 where the width is not known


def test_a_row_shows_its_raced_runs_sentence_though_most_runs_held_and_a_run_without_one_shows_none():
    checked = result(plan(), {**HELD, "seed": [summary("race", "rank 1 missing"), summary("clean", "fine"),
                                               summary("clean", "fine")],
                              "torn": [{"verdict": "clean"}] * 2}, MEASURED)
    rows = {r["name"]: r for r in checked["scenarios"]}
    assert rows["seed"]["explanation"] == "rank 1 missing" and rows["torn"]["explanation"] == ""


def test_strict_fails_a_check_only_on_rows_not_checked_and_a_not_checked_row_counts_no_run():
    held = result(plan("own", strict=True), HELD, MEASURED)
    assert held["verdict"] == "safe"  # every row checked and held: strict has nothing to fail
    unchecked = result(plan("own", {"torn": "a fix of the load of the best", "save_fails": "no disk full here"},
                            strict=False), held_but("torn"), MEASURED)
    torn = next(r for r in unchecked["scenarios"] if r["name"] == "torn")
    assert (torn["counted"], torn["races"], torn["not_counted"]) == (0, 0, 0)
    assert last_line(unchecked) == ("safe on the 1 checked; 2 not checkable (save_fails, torn: no disk full here; a "
                                    "fix of the load of the best; a shipped fix of this framework checks them; "
                                    "check.strict=true fails the check on them)")


def test_the_last_line_lists_every_race_and_every_failed_scenario():
    raced = result(plan(), {**HELD, "seed": [summary("race", "x")] * 2, "torn": [summary("race", "y")] * 2}, MEASURED)
    assert last_line(raced).startswith("unsafe: raced in 2 of 3 (seed, torn); ")
    failed = result(plan(), {**HELD, "seed": [summary("error")] * 2, "torn": [summary("error")] * 2}, MEASURED)
    assert last_line(failed).startswith("error: no verdict for seed, torn: the harness failed there")


def test_a_card_with_no_scenario_run_and_an_answer_never_broken_at_a_hyphen():
    nothing = result({**plan(), "scenarios": [], "left_out": [{"name": "seed", "why": "no"}]}, {}, MEASURED)
    assert card(nothing).splitlines()[1:] == ["  left out 1 (why: check.md): seed", "safe: held all 0 scenarios"]
    inhouse = result({**plan(), "framework": "our-in-house-trainer"}, {**HELD, "seed": [summary("race")] * 2}, {})
    line = last_line(inhouse)
    width = line.index("our-in-house-trainer") + 12  # the name cannot end the first line: it goes whole to the next
    assert any("our-in-house-trainer" in part for part in card(inhouse, width).splitlines()[-2:])
