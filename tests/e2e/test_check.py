"""race-lab check (issue 29): the card from hand-made summaries, the measured matrix it reads, which scenarios it
runs for a setup, its refusals, and one check end to end with real ranks."""
import csv
import json
import subprocess
import sys

import pytest

from conftest import ROOT, tagged_env
from helpers.markdown import PYTHON_BLOCK
from train.config import ConfigError
from train.launch.check import plan_check
from train.report.check_card import card, last_line, result
from train.report.measured import (
    advice,
    holds_with,
    holds_with_run,
    read_measured,
    recommended,
)

FIELDS = ["framework", "scenario", "fix", "counted", "races", "not_counted"]


def write_measured(folder, rows):
    with open(folder / "m.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(dict(zip(FIELDS, row)) for row in rows)
    return read_measured("lightning", folder)


def test_the_measured_matrix_says_which_fixes_hold_and_which_one_holds_all(tmp_path):
    measured = write_measured(tmp_path, [
        ("lightning", "seed", "as_shipped", 5, 0, 0), ("lightning", "seed", "rank0_leads", 5, 0, 0),
        ("lightning", "seed", "broadcast", 5, 0, 0),
        ("lightning", "save_fails", "broadcast", 5, 5, 0), ("lightning", "save_fails", "rank0_leads", 5, 0, 0),
        ("lightning", "save_fails", "agreed", 4, 0, 1),  # a run whose harness failed: not shown to hold
        ("fastai", "save_fails", "barrier", 5, 0, 0),  # another framework's
        ("lightning", "torn", "dcp", "", "", "")])  # an n/a cell: no runs
    assert holds_with(measured, "seed") == ["rank0_leads", "as_shipped", "broadcast"]
    assert holds_with(measured, "save_fails") == ["rank0_leads"]
    assert holds_with(measured, "torn") == []
    assert recommended(measured, ["seed", "save_fails"]) == "rank0_leads"
    assert recommended(measured, ["seed", "torn"]) is None


def summary(verdict, explanation=""):
    return {"verdict": verdict, "explanation": explanation}


PLAN = {"framework": "lightning", "fix": "as_shipped", "class": None, "repeats": 2, "world_size": 2,
        "setup": {"disks": "any", "restarts": True}, "left_out": [{"name": "many_writers", "why": "cannot happen"}],
        "scenarios": [{"name": "seed", "workload": "load_best", "cannot": None},
                      {"name": "save_fails", "workload": "load_best", "cannot": None},
                      {"name": "torn", "workload": "load_best", "cannot": "no torn file here"}]}
MEASURED = {"seed": {"as_shipped": (5, 0, 0), "rank0_leads": (5, 0, 0)},
            "save_fails": {"rank0_leads": (5, 0, 0)}, "torn": {"rank0_leads": (5, 0, 0)}}


def test_a_race_in_any_scenario_or_an_na_cell_makes_the_check_unsafe_and_names_the_fix_that_holds_all():
    checked = result(PLAN, {"seed": [summary("clean")] * 2,
                            "save_fails": [summary("race", "rank 0's save failed"), summary("save_failed")]},
                     MEASURED)
    rows = {r["name"]: r for r in checked["scenarios"]}
    assert (rows["seed"]["verdict"], rows["seed"]["counted"], rows["seed"]["races"]) == ("held", 2, 0)
    assert (rows["save_fails"]["verdict"], rows["save_fails"]["races"]) == ("raced", 1)
    assert rows["save_fails"]["explanation"] == "rank 0's save failed"  # the raced runs' explanation
    assert rows["save_fails"]["holds_with"] == ["rank0_leads"]
    assert 0 < rows["save_fails"]["ci_low"] < 0.5 < rows["save_fails"]["ci_high"] <= 1
    assert rows["torn"]["verdict"] == "raced" and "n/a for this fix" in rows["torn"]["explanation"]
    assert checked["verdict"] == "unsafe" and checked["recommended"] == "rank0_leads"
    assert last_line(checked) == ("unsafe: raced in 2 of 3 (save_fails, torn); the change that holds all 3: "
                                  "fix=rank0_leads (docs/fixes/lightning.md)")
    assert "  left out 1 (why: check.md): many_writers" in card(checked)


def test_a_check_that_held_every_scenario_is_safe_and_a_failed_harness_is_no_race():
    plan = {**PLAN, "scenarios": PLAN["scenarios"][:2]}
    safe = result(plan, {"seed": [summary("clean")] * 2, "save_fails": [summary("save_failed")] * 2}, MEASURED)
    assert safe["verdict"] == "safe" and last_line(safe) == "safe: held all 2 scenarios"
    failed = result(plan, {"seed": [summary("clean")] * 2, "save_fails": [summary("error")] * 2}, MEASURED)
    assert failed["verdict"] == "error" and failed["errors"] == ["save_fails"]
    assert "not a race" in last_line(failed)


OWN = {**PLAN, "fix": "own", "class": "mine.Keeper", "left_out": [],
       "scenarios": [{"name": "seed", "workload": "load_best", "cannot": None},
                     {"name": "crash_mid_save", "workload": "resume", "cannot": "a fix of the load of the best"},
                     {"name": "cleanup", "workload": "resume", "cannot": "a fix of the load of the best"}]}


def test_a_scenario_your_class_cannot_run_is_not_checked_and_never_counted():
    """fix=own: an n/a scenario is said (not checked), neither held nor raced; the check is safe on the rest unless
    check.strict, and a race elsewhere is counted among the checked only."""
    checked = result(OWN, {"seed": [summary("clean")] * 2}, MEASURED)
    rows = {r["name"]: r for r in checked["scenarios"]}
    assert rows["cleanup"]["verdict"] == "not_checked" and rows["cleanup"]["explanation"].startswith("not checked: ")
    assert checked["verdict"] == "safe"
    assert last_line(checked) == (
        "safe on the 1 checked; 2 not checkable (crash_mid_save, cleanup: a fix of the load of the best; if your "
        "jobs never restart, check.restarts=false leaves them out; check.strict=true fails the check on them)")
    assert "  cleanup         resume     not checked" in card(checked)
    strict = result({**OWN, "strict": True}, {"seed": [summary("clean")] * 2}, MEASURED)
    assert strict["verdict"] == "unsafe" and last_line(strict).startswith("unsafe: held the 1 checked; 2 not checkable")
    raced = result(OWN, {"seed": [summary("race", "rank 1 stale")] * 2}, MEASURED)
    assert raced["verdict"] == "unsafe"
    assert last_line(raced).startswith("unsafe: raced in 1 of 1 checked (seed); 2 not checkable (")


def test_the_setup_leaves_out_the_scenarios_it_cannot_meet_and_an_na_cell_counts_against_the_fix():
    plan = plan_check(["framework=fastai", "fix=dcp", "check.disks=shared"])
    ran = {s["name"]: s["cannot"] for s in plan["scenarios"]}
    left = {s["name"]: s["why"] for s in plan["left_out"]}
    assert "no_shared_fs" in left and "check.disks=shared" in left["no_shared_fs"]
    assert "crash_mid_save" in left and "cannot happen in fastai" in left["crash_mid_save"]
    assert ran["torn"] and ran["seed"] is None  # dcp's n/a cell on torn counts against it, seed runs
    plan = plan_check(["framework=torch_loop"])  # resumes only: the load-best scenarios cannot happen there
    assert [s["name"] for s in plan["scenarios"]] == ["crash_mid_save", "pointer_first", "cleanup", "resume_disagree"]
    assert plan["fix"] == "in_place"
    plan = plan_check(["framework=lightning", "fix=as_shipped", "check.restarts=false"])
    assert "check.restarts=false" in {s["name"]: s["why"] for s in plan["left_out"]}["crash_mid_save"]
    assert {s["name"] for s in plan["scenarios"]} >= {"seed", "save_fails", "no_shared_fs"}


ASYNC = ["async_in_flight", "async_exit_pending", "async_overlap", "async_shared_group", "dcp_overwrite"]


def test_async_saves_are_checked_on_their_own_with_check_saves_async():
    """check.saves=async runs only the async saves' scenarios of the framework; sync (the default) leaves them out,
    saying which command checks them."""
    plan = plan_check(["framework=torch_loop", "check.saves=async"])
    left = {s["name"]: s["why"] for s in plan["left_out"]}
    assert [s["name"] for s in plan["scenarios"]] == ASYNC and plan["fix"] == "in_place"
    assert "your saves are async (check.saves=async)" in left["crash_mid_save"]
    assert [s["name"] for s in plan_check(["framework=lightning", "check.saves=async"])["scenarios"]] == ["async_top_k"]
    assert all(s["cannot"] is None for s in plan_check(["framework=torch_loop", "check.saves=async",
                                                        "fix=durable"])["scenarios"])
    left = {s["name"]: s["why"] for s in plan_check(["framework=torch_loop"])["left_out"]}
    assert "race-lab check framework=torch_loop check.saves=async checks async saves" in left["async_in_flight"]


def test_the_measured_async_rows_name_one_fix_that_holds_them_all():
    """docs/measured/: no single async fix of the torch loop holds all five rows; durable (all of them at once)
    does. Lightning's async_top_k holds with on_durable. The card sends the reader to durable's file to copy."""
    measured = read_measured("torch_loop")
    assert all(recommended(measured, [name]) for name in ASYNC)
    assert recommended(measured, ASYNC) == "durable"
    assert "durable" in holds_with(measured, "async_shared_group") and "on_durable" not in holds_with(
        measured, "async_shared_group")
    assert recommended(read_measured("lightning"), ["async_top_k"]) == "on_durable"
    plan = {**PLAN, "framework": "torch_loop", "fix": "in_place", "setup": {"saves": "async"}, "left_out": [],
            "scenarios": [{"name": n, "workload": "resume", "cannot": None} for n in ASYNC]}
    checked = result(plan, {n: [summary("race", "mixed")] for n in ASYNC}, measured)
    assert last_line(checked).endswith("the change that holds all 5: fix=durable (docs/fixes/torch_loop-durable.md)")


@pytest.mark.parametrize("argv, says", [
    (["framework=lightning", "fix=unsynced"], "this runs: race-lab check framework=lightning fix=as_shipped"),
    (["framework=fastai", "check.saves=async"], "check.saves=async: framework=fastai has no async save here"),
    (["framework=torch_loop", "checkpoint.async_save=true"], "say how your code saves with check.saves=sync or"),
    (["framework=torch_loop", "fix=durable"], "this runs: race-lab check framework=torch_loop check.saves=async "
                                              "fix=durable"),
    (["framework=fastai", "fix=own"], "fix=own: give the class to test"),
    (["framework=fastai", "world_size=3"], ("world_size=3: must be a multiple of nnodes=2 (the same ranks on each "
                                            "node) (in scenario=no_shared_fs, which the check runs)")),
])
def test_input_that_cannot_work_is_refused_before_any_rank(argv, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        plan_check(argv)


def test_the_command_refuses_bad_input_in_one_line_with_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "train", "check", "framework=lightning", "check.repeats=0"],
                          check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: check.repeats=0: must be an integer >= 1 and <= 100"]
    assert not (tmp_path / "runs").exists()



def test_a_check_into_a_folder_that_holds_runs_already_is_refused_and_leaves_it_as_it_was(tmp_path):
    """An explicit hydra.sweep.dir that is not empty (an earlier check's runs): its summaries would be counted with
    the new check's, so the command refuses it before any rank starts."""
    earlier = tmp_path / "check"
    (earlier / "0-lightning-seed-as_shipped-r0").mkdir(parents=True)
    (earlier / "check.json").write_text("{}\n")
    done = subprocess.run([sys.executable, "-m", "train", "check", "framework=lightning", f"hydra.sweep.dir={earlier}"],
                          check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: hydra.sweep.dir={earlier}: the folder is not empty; name a new or empty one"]
    assert sorted(p.name for p in earlier.iterdir()) == ["0-lightning-seed-as_shipped-r0", "check.json"]
    assert (earlier / "check.json").read_text() == "{}\n"

@pytest.mark.slow
def test_fastai_as_shipped_is_unsafe_and_the_card_names_the_fix(tmp_path):
    """The check end to end with real ranks (one run a scenario): fastai as shipped races; check.json says so."""
    out = tmp_path / "check"
    done = subprocess.run([sys.executable, "-m", "train", "check", "framework=fastai", "check.repeats=1",
                           f"hydra.sweep.dir={out}"], check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=900, env=tagged_env(str(out)))
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    checked = json.loads((out / "check.json").read_text())
    assert set(checked) >= {"verdict", "framework", "class", "scenarios", "recommended"}
    rows = {r["name"]: r for r in checked["scenarios"]}
    assert rows["seed"]["verdict"] == "held" and rows["save_fails"]["verdict"] == "raced"
    assert set(rows["save_fails"]) >= {"name", "workload", "verdict", "counted", "races", "ci_low", "ci_high",
                                       "explanation", "holds_with"}
    assert any(line.startswith("unsafe: raced in ") for line in done.stdout.splitlines())  # the answer, wrapped
    assert (out / "check.md").exists() and (out / "check.html").exists()
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.slow
def test_the_async_fix_that_holds_every_async_row_checks_safe(tmp_path):
    """check.saves=async with fix=durable, real ranks (one run a scenario): every async row held, exit 0."""
    out = tmp_path / "check"
    done = subprocess.run([sys.executable, "-m", "train", "check", "framework=torch_loop", "check.saves=async",
                           "fix=durable", "check.repeats=1", f"hydra.sweep.dir={out}"], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=900, env=tagged_env(str(out)))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    checked = json.loads((out / "check.json").read_text())
    assert [(r["name"], r["verdict"], r["counted"]) for r in checked["scenarios"]] == [(n, "held", 1) for n in ASYNC]
    assert checked["setup"]["saves"] == "async" and checked["recommended"] == "durable"


@pytest.mark.slow
def test_a_class_of_yours_that_holds_every_scenario_with_its_own_resume_pick_is_safe(tmp_path):
    """fix=own end to end, real ranks: docs/fixes/lightning.md's file copied into a team's package outside the
    repository, its resume's fit given the copy's own rank0_last_checkpoint (fix.ckpt_path), holds the six load_best
    scenarios and the four resume ones (one run each): exit 0. Before, Lightning ran no class of yours on its resume
    and the four resume rows were not checked (the words for that are the card's unit tests', above)."""
    (tmp_path / "teamio").mkdir()
    (tmp_path / "teamio" / "__init__.py").write_text("")
    [code] = PYTHON_BLOCK.findall((ROOT / "docs" / "fixes" / "lightning.md").read_text())
    (tmp_path / "teamio" / "io.py").write_text(code)
    out = tmp_path / "check"
    done = subprocess.run([sys.executable, "-m", "train", "check", "framework=lightning", "fix=own",
                           "fix._target_=teamio.io.Rank0LeadsCheckpointIO", "fix.ckpt_path=teamio.io.rank0_last_checkpoint",
                           "check.repeats=1", "check.disks=shared",
                           f"hydra.sweep.dir={out}"], check=False, cwd=tmp_path, capture_output=True, text=True,
                          timeout=900, env={**tagged_env(str(out)), "PYTHONPATH": ""})  # the team's folder, as it runs
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    checked = json.loads((out / "check.json").read_text())
    rows = {r["name"]: r["verdict"] for r in checked["scenarios"]}
    resume = ["crash_mid_save", "pointer_first", "cleanup", "resume_disagree"]
    assert rows == {n: "held" for n in ["seed", "stale", "torn", "skip_if_missing", "disagree", "save_fails", *resume]}
    assert checked["verdict"] == "safe" and checked["class"] == "teamio.io.Rank0LeadsCheckpointIO"
    assert last_line(checked) == "safe: held all 10 scenarios"
    assert " ".join(done.stdout.split()).count(last_line(checked)) == 1  # the card's answer, as wrapped on the console

def test_a_race_says_what_holds_it_in_its_framework_as_measured(tmp_path):
    write_measured(tmp_path, [("lightning", "no_shared_fs", "broadcast", 5, 0, 0),
                              ("lightning", "no_shared_fs", "as_shipped", 5, 5, 0)])
    raced = {"verdict": "race", "config": {"scenario": "no_shared_fs", "framework": {"name": "lightning"}}}
    assert holds_with_run(raced, tmp_path) == ["broadcast"]
    assert advice({**raced, "holds_with": ["broadcast"]}).endswith(
        "what holds it in lightning, as measured (docs/measured/): fix=broadcast")
    assert holds_with_run({**raced, "verdict": "clean"}, tmp_path) == []


def test_deepspeed_as_measured_rank0_leads_holds_the_shared_disk_rows_and_node_local_storage_holds_every_row():
    """docs/measured/deepspeed-*.csv: shard_lost holds with rank0_leads (the file to copy), atomic, agreed, manifest
    and node_local_storage; node_local_resume (each rank's partition on its own node's disk) with node_local_storage
    alone; stale_tag (an older run's tag in the folder) with rank0_leads, manifest and node_local_storage (its
    resume is manifest's). On shared disks the check recommends the file to copy."""
    measured = read_measured("deepspeed")
    assert holds_with(measured, "shard_lost") == ["rank0_leads", "atomic", "agreed", "manifest", "node_local_storage"]
    assert holds_with(measured, "node_local_resume") == ["node_local_storage"]
    assert holds_with(measured, "stale_tag") == ["rank0_leads", "manifest", "node_local_storage"]
    shared = ["crash_mid_save", "shard_lost", "cleanup"]  # check.disks=shared leaves node_local_resume out
    assert recommended(measured, shared) == recommended(measured, [*shared, "stale_tag"]) == "rank0_leads"
    assert recommended(measured, [*shared, "stale_tag", "node_local_resume"]) == "node_local_storage"
    plan = {"framework": "deepspeed", "fix": "as_shipped", "repeats": 1, "world_size": 2, "setup": {},
            "left_out": [], "scenarios": [{"name": n, "workload": "resume", "cannot": None} for n in shared]}
    checked = result(plan, {"crash_mid_save": [summary("clean")], "shard_lost": [summary("race", "missing")],
                            "cleanup": [summary("clean")]}, measured)
    assert last_line(checked) == ("unsafe: raced in 1 of 3 (shard_lost); the change that holds all 3: fix=rank0_leads "
                                  "(docs/fixes/deepspeed.md)")
