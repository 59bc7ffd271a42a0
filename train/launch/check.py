"""`race-lab check framework=<name> [fix=...] [key=value ...]`: is this checkpoint code safe on my setup, and if not,
what do I change?

1. Compose the config of every scenario with the user's keys (Hydra's compose API), as a run would; bad input is
   one line and exit 2 before any rank starts.
2. Sort the scenarios: those that cannot happen in this framework or in the declared setup (check.disks,
   check.restarts, check.saves) are left out, and said why; those where the fix has no way to hold (an n/a cell) count against
   it; the rest run.
3. Run those as one Hydra multirun, check.repeats times each, jobs side by side. Its output goes to check.log; its
   line a job drives the console's progress (train/launch/progress.py), or with launch.job_lines=true is echoed.
4. Judge: train/report/check_card.py makes the card, check.json and check.md from the runs' summaries and the
   measured matrix (docs/measured/); check.html the card as a page (train/report/check_html.py), matrix.html the runs.
5. Prune (train/report/prune.py): a run that held keeps only its records, unless check.keep_runs=true.
Exit codes: 0 safe, 1 unsafe, 2 bad input, 3 the harness failed (never a race), 130 interrupted.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from train.config import ConfigError, check
from train.frameworks.registry import register_configs
from train.launch.defaults import CONFIGS, options, with_defaults_filled
from train.launch.folders import fresh_folder
from train.launch.plan import check_config, framework_cannot, not_applicable, the_framework
from train.launch.preflight import EXIT_BAD_CONFIG, EXIT_HARNESS, EXIT_INTERRUPTED, check_limits, check_used
from train.launch.progress import JobsProgress
from train.launch.sweep import verdict_of_job_line
from train.report.check_card import WIDTH, card, markdown, result
from train.report.check_html import page as check_page
from train.report.files import write_json_atomic
from train.report.matrix import SCENARIO_ORDER
from train.report.measured import read_measured
from train.report.prune import prune, report_again
from train.report.run_records import find_runs, read_summary

EXIT_SAFE, EXIT_UNSAFE = 0, 1
CHECK_WORLD_SIZE = "world_size=2"  # 2 ranks, as the matrix: a third proves nothing more about these races
SETTLED = "skew.end_when_settled=true"  # as the matrix: a stall no longer than it takes every other rank to settle
USAGE = "usage: race-lab check framework=<name> [fix=<fix> | fix=own fix._target_=pkg.mod.Class] [key=value ...]"


def _given(argv: list, key: str):
    return next((a.split("=", 1)[1] for a in argv if a.split("=", 1)[0].lstrip("+") == key), None)


def compose_scenario(argv: list, scenario: str) -> dict:
    """The config a run of `scenario` with the user's keys composes to, as plain data (checkpoint.dir, which names
    Hydra's run dir, stands in as a folder of the check's). Call inside initialize_config_dir (plan_check)."""
    from hydra import compose
    from omegaconf import OmegaConf

    keys = [a for a in argv if not a.split("=", 1)[0].lstrip("+").startswith(("hydra", "scenario"))]
    composed = compose("train", overrides=[*keys, f"scenario={scenario}"])
    if "${hydra:" in str(OmegaConf.to_container(composed, resolve=False)["checkpoint"]["dir"]):
        OmegaConf.update(composed, "checkpoint.dir", str(Path.cwd() / "runs" / "check"))
    return OmegaConf.to_container(composed, resolve=True)


def plan_check(argv: list) -> dict:
    """Which scenarios run, which count against the fix without running, and which are left out (and why).
    Raises ConfigError (one line) for input that cannot work."""
    from hydra import initialize_config_dir

    register_configs(CONFIGS)
    argv = with_defaults_filled(argv if _given(argv, "framework") else [*argv, "framework=fastai"])
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3", job_name="check"):
        return {**_plan(argv), "argv": argv}


def _plan(argv: list) -> dict:
    from train.launch.own_class import check_own_class

    framework = _given(argv, "framework")
    scenarios = sorted(options("scenario"), key=lambda s: SCENARIO_ORDER.index(s) if s in SCENARIO_ORDER else 99)
    first = compose_scenario(argv, scenarios[0])
    check(first)  # each key in its range; the rules across keys, scenario by scenario below
    fix, setup = first["fix"]["name"], first["check"]
    if _given(argv, "checkpoint.async_save") is not None:
        raise ConfigError("checkpoint.async_save: the check sets it scenario by scenario; say how your code saves "
                          "with check.saves=sync or check.saves=async")
    contract = the_framework(first)
    if not any(fix in fixes for fixes in contract.fixes.values()):
        raise ConfigError(f"fix={fix}: n/a for framework={framework}: {contract.why_no_fix(fix, first['workload'])}; "
                          f"this runs: race-lab check framework={framework} fix={contract.as_shipped_fix}")
    if "async_save" in first["fix"]["needs"] and setup["saves"] == "sync":
        raise ConfigError(f"fix={fix}: a fix of an async save (check.saves=sync says yours are synchronous); this "
                          f"runs: race-lab check framework={framework} check.saves=async fix={fix}")
    if fix == "own":
        check_own_class(first)
    built_in = {first["workload"]: ""}  # workload -> why your class cannot be built as its adapter builds it
    plan = {"framework": framework, "fix": fix, "class": first["fix"].get("_target_") if fix == "own" else None,
            "repeats": setup["repeats"], "world_size": 2, "scenarios": [], "left_out": [], "strict": setup["strict"],
            "job_lines": first["launch"]["job_lines"], "keep_runs": setup["keep_runs"],
            "setup": {"disks": setup["disks"], "restarts": setup["restarts"], "saves": setup["saves"]}}
    for name in scenarios:
        cfg = compose_scenario(argv, name)
        workload, why_not_here = cfg["workload"], framework_cannot(cfg)
        if why_not_here:
            plan["left_out"].append({"name": name, "why": f"cannot happen in {framework}: {why_not_here}"})
        elif setup["disks"] == "shared" and cfg["checkpoint"]["node_local"]:
            plan["left_out"].append({"name": name, "why": "your checkpoints are on one shared filesystem "
                                                          "(check.disks=shared)"})
        elif not setup["restarts"] and workload == "resume":
            plan["left_out"].append({"name": name, "why": "your jobs do not restart (check.restarts=false)"})
        elif cfg["checkpoint"]["async_save"] != (setup["saves"] == "async"):
            plan["left_out"].append({"name": name, "why": _other_saves(name, setup["saves"], framework)})
        else:
            cannot = not_applicable(cfg)
            if not cannot and fix == "own" and workload not in built_in:
                built_in[workload] = _built(cfg)
            if not cannot and fix == "own" and built_in[workload]:
                cannot = built_in[workload]
            if not cannot:
                try:  # a value no run of this scenario takes (world_size=3 on its two nodes, a key it ignores)
                    check_config(cfg)
                    check_used(cfg, argv)
                    check_limits(cfg)
                except ConfigError as e:
                    raise ConfigError(f"{e} (in scenario={name}, which the check runs)") from None
            plan["scenarios"].append({"name": name, "workload": workload, "cannot": cannot})
    if not plan["scenarios"] and setup["saves"] == "async":
        raise ConfigError(f"check.saves=async: framework={framework} has no async save here; the async saves "
                          "checked are framework=torch_loop's (dcp.async_save) and framework=lightning's "
                          "(AsyncCheckpointIO)")
    if not plan["scenarios"]:
        raise ConfigError(f"framework={framework} fix={fix}: no scenario applies to this setup")
    return plan


def _built(cfg: dict) -> str:
    """'' when your class can be built as this scenario's workload builds it, else why not (its rows not checked)."""
    from train.launch.own_class import check_own_class

    try:
        check_own_class(cfg)
    except ConfigError as e:
        return str(e)
    return ""


def _other_saves(name: str, saves: str, framework: str) -> str:
    """Why a scenario of the other kind of save is left out, and the command that checks it."""
    if saves == "async":
        return "a synchronous save's scenario; your saves are async (check.saves=async)"
    return (f"an async save's scenario; your saves are synchronous (check.saves=sync); "
            f"race-lab check framework={framework} check.saves=async checks async saves")


def sweep_command(argv: list, plan: dict, out: Path) -> list:
    """The one Hydra multirun of every scenario that runs, check.repeats times each, jobs side by side."""
    ran = [s["name"] for s in plan["scenarios"] if not s["cannot"]]
    jobs = _jobs(argv)
    elsewhere = _given(argv, "hydra/launcher") is not None  # the user's launcher: hydra/launcher=ray, a cluster's
    keys = [a for a in argv if not a.split("=", 1)[0].lstrip("+").startswith(("hydra.sweep.dir", "scenario", "check.",
                                                                             "launch.job_lines"))]
    return [sys.executable, "-m", "train", "-m", *([CHECK_WORLD_SIZE] if _given(argv, "world_size") is None else []),
            *([SETTLED] if _given(argv, "skew.end_when_settled") is None else []), *keys, f"scenario={','.join(ran)}",
            f"repeat=range({plan['repeats']})", f"hydra.sweep.dir={out}", "launch.job_lines=true",  # what run_sweep reads
            *(["hydra/launcher=jobs", f"hydra.launcher.n_jobs={jobs}"] if jobs > 1 and not elsewhere else [])]


def _jobs(argv) -> int:
    """check.jobs, or one more than cores, as make matrix: a check's jobs mostly wait, leaving their cores idle."""
    given = int(_given(argv, "check.jobs") or 0)
    return given or (os.cpu_count() or 1) + 1


def _scenario_of(run: Path):
    """A run's scenario, from its summary or, for a run that wrote none, from its Hydra overrides."""
    summary = read_summary(run)
    if summary:
        return summary["config"].get("scenario")
    overrides = (run / ".hydra" / "overrides.yaml")
    found = re.search(r"scenario=(\w+)", overrides.read_text()) if overrides.exists() else None
    return found[1] if found else None


def summaries_by_scenario(out: Path) -> dict:
    """scenario -> the summaries of its runs; a run that wrote none counts as crashed (not a race)."""
    found = {}
    for run in find_runs(out):
        summary = read_summary(run) or {"verdict": "crashed", "explanation": f"no summary.json in {run}"}
        found.setdefault(_scenario_of(run), []).append(summary)
    return found


def run_sweep(command: list, log: Path, jobs: int, job_lines: bool = False) -> int:
    """The sweep, its output into `log`; on the console its jobs' progress, or its line a job (job_lines), and its
    error lines. It runs in a session of its own, so that Ctrl-C (or SIGTERM) reaches the sweep's process alone, passed
    on from here: a terminal's Ctrl-C to the group also reached the sweep's idle job workers, whose death broke the
    pool (joblib's BrokenProcessPool), and the sweep then ended the running jobs before they wrote their summaries.
    The sweep ends its jobs as single runs stop, and we exit 130."""
    from train.process import end_with_parent

    progress = None if job_lines else JobsProgress(jobs, "[check]")
    say = progress.say if progress else print
    with open(log, "w", encoding="utf-8") as written:
        sweep = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True, preexec_fn=end_with_parent)  # noqa: PLW1509 (no thread yet)
        interrupted = []

        def pass_on(signum, _frame):
            interrupted.append(True)
            sweep.send_signal(signum)

        previous = {s: signal.signal(s, pass_on) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            for line in sweep.stdout:
                written.write(line)
                verdict = verdict_of_job_line(line)
                if progress and verdict is not None:
                    progress.ended(verdict)
                elif verdict is not None or line.startswith("error:"):
                    say(line.rstrip())
            code = sweep.wait()
            return EXIT_INTERRUPTED if interrupted else code  # however the sweep ended, the check was interrupted
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if progress:
                progress.close()


def main(argv: list) -> int:
    """race-lab check; returns its exit code."""
    from train.launch.hydra_errors import config_error_line

    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    came = []

    def interrupt(signum, frame):
        came.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        plan = plan_check(argv)
    except Exception as e:
        if came:  # Hydra turned the interrupt inside its composition into an error of its own, or the class
            raise KeyboardInterrupt from None  # check's process (train/launch/own_class.py) died of it
        if isinstance(e, ConfigError):
            print(f"error: {e}", file=sys.stderr)
            return EXIT_BAD_CONFIG
        line = config_error_line(e)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    finally:
        signal.signal(signal.SIGINT, previous)
    given = _given(argv, "hydra.sweep.dir")
    if given:
        out = Path(given).resolve()
        if out.is_dir() and any(out.iterdir()):  # an earlier check's runs would be counted with this one's
            print(f"error: hydra.sweep.dir={given}: the folder is not empty; name a new or empty one", file=sys.stderr)
            return EXIT_BAD_CONFIG
        out.mkdir(parents=True, exist_ok=True)
    else:
        out = fresh_folder(Path("runs") / "check" /
                           f"{time.strftime('%Y-%m-%d_%H-%M-%S')}-{plan['framework']}-{plan['fix']}").resolve()
    ran = [s["name"] for s in plan["scenarios"] if not s["cannot"]]
    print(f"race-lab check: {len(ran)} scenario(s) x {plan['repeats']} run(s) into {out}", flush=True)
    code = run_sweep(sweep_command(plan["argv"], plan, out), out / "check.log", len(ran) * plan["repeats"],
                     plan["job_lines"]) if ran else 0
    if code == EXIT_INTERRUPTED or code < 0:
        print(f"interrupted: the runs so far are in {out}", file=sys.stderr)
        return EXIT_INTERRUPTED
    checked = result(plan, summaries_by_scenario(out), read_measured(plan["framework"]))
    write_json_atomic(out / "check.json", checked)
    (out / "check.md").write_text(markdown(checked), encoding="utf-8")
    if not plan["keep_runs"]:  # a run that held keeps its records; the report and matrix.html made again from them
        prune(out)
        report_again(out)
    (out / "check.html").write_text(check_page(checked, "matrix.html" if (out / "matrix.html").exists() else ""),
                                    encoding="utf-8")  # reads without JavaScript; the runs' grid is matrix.html
    print(card(checked, shutil.get_terminal_size((WIDTH, 24)).columns), flush=True)
    print(f"card: {out / 'check.md'} and {out / 'check.html'}; runs to click through: {out / 'matrix.html'}", flush=True)
    return {"safe": EXIT_SAFE, "unsafe": EXIT_UNSAFE}.get(checked["verdict"], EXIT_HARNESS)


def cli(argv: list):
    sys.exit(main(argv))


if __name__ == "__main__":
    cli(sys.argv[1:])
