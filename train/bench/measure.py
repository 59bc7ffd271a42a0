"""What make bench measures: each run it makes, and the figures read from its events."""
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from train.events import read_events
from train.rank.observe import SWITCH
from train.report.run_records import fix_name

ROOT = Path(__file__).resolve().parents[2]
PLAIN = ROOT / "bench" / "plain_torchrun.py"
WORLD = 3
# a framework's single run where the default scenario (seed, a load of the best at the end) is n/a: DeepSpeed's
# resume, without its kill (each attempt's load_checkpoint, a save every epoch), the plain script's work
FRAMEWORK_SCENARIO = {"deepspeed": ("scenario=crash_mid_save", "fault.kill_epoch=null")}
FRAMEWORK_MODULES = ("fastai", "pytorch_lightning", "lightning", "transformers", "accelerate", "deepspeed")


def default_jobs() -> int:
    """make matrix's JOBS default: one job more than the cores this process may use (nproc + 1)."""
    return (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()) + 1


def matrix_run(sweep_dir: Path, jobs: int, scenarios: str, fixes: str) -> dict:
    """The matrix subset as `make matrix JOBS=jobs REPEATS=1` runs it: its wall and each job's verdict."""
    side_by_side = ["hydra/launcher=jobs", f"hydra.launcher.n_jobs={jobs}"] if jobs > 1 else []
    load, began = os.getloadavg()[0], time.time()
    run = sweep(sweep_dir, f"scenario={scenarios}", f"fix={fixes}", "framework=fastai", "world_size=2",
                "skew.end_when_settled=true", "repeat=range(1)", *side_by_side)
    verdicts = {}
    for job in run.pop("jobs"):
        verdicts[job["verdict"]] = verdicts.get(job["verdict"], 0) + 1
    return {**run, "jobs_side_by_side": jobs, "verdicts": verdicts, "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2), "floor_s": matrix_floor(sweep_dir, began)}


def matrix_floor(sweep_dir: Path, began: float):
    """What no scheduling can beat: every job's training with its stalls (rank 0's fit_start to train_end: the
    scenario's skew and mid-write stall fall inside it) spread over the cores, plus the start-up (the sweep's
    start to its first rank_start). None when a job left no such events."""
    busy, first_rank = 0.0, None
    for job in (d for d in sweep_dir.iterdir() if (d / "summary.json").exists() and (d / "events").exists()):
        first = first_events(job)
        if (0, "fit_start") not in first or (0, "train_end") not in first:
            return None
        busy += first[(0, "train_end")] - first[(0, "fit_start")]
        starts = [t for (rank, event), t in first.items() if event == "rank_start"]
        first_rank = min([first_rank, *starts] if first_rank else starts)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return round(busy / cores + (first_rank - began), 3) if first_rank else None


NODE_POINTS = (("agents_started", "launch_start", "launcher", min), ("ranks_started", "rank_start", None, min),
               ("ranks_ended", "rank_end", None, max), ("agents_ended", "launch_end", "launcher", max))


def job_wall(job: Path):
    """A job's seconds from its launcher's launch_start to its summary.json (the merge included)."""
    first = first_events(job) if (job / "events").exists() else {}
    start = first.get(("launcher", "launch_start"))
    return round((job / "summary.json").stat().st_mtime - start, 3) if start and (job / "summary.json").exists() \
        else None


def node_phases(job: Path) -> dict:
    """Where a two-node job's time goes, each point in seconds from the job's launch_start: the node agents
    started (their first launch_start), the first rank started, the last rank ended, the agents ended."""
    start = first_events(job).get(("launcher", "launch_start"))
    events = [e for d in sorted((job / "nodes").glob("node*")) for e in read_events(d)]
    phases = {}
    for name, event, rank, pick in NODE_POINTS:
        times = [e["t"] for e in events if e["event"] == event and (rank is None or e["rank"] == rank)]
        phases[name] = round(pick(times) - start, 3) if times and start else None
    return phases


def nodes_run(sweep_dir: Path, repeats: int, skew: float) -> dict:
    """One sweep, one job after another, alternating the one-node and the two-node cell at the same skew."""
    load = os.getloadavg()[0]
    run = sweep(sweep_dir, f"repeat=range({repeats + 1})", "scenario=seed,no_shared_fs", "framework=fastai",
                "fix=broadcast", "world_size=2", f"skew.seconds={skew}")
    one, two, phases = [], [], []
    for i, job in enumerate(run["jobs"]):
        path = sweep_dir / job["job"]
        job["wall_s"] = job_wall(path)
        if "no_shared_fs" in job["job"]:
            two.append(job["wall_s"])
            phases.append(node_phases(path))
        elif i > 0:  # the first job waits for the forkserver's preload
            one.append(job["wall_s"])
    return {**run, "one_node_job_s": median(one), "two_node_job_s": median(two),
            "two_node_phases_s": {name: median(p[name] for p in phases) for name, *_ in NODE_POINTS},
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


def sample_rss(proc) -> int:
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, proc.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    return peak


def single_run(run_dir: Path, skew: float, extra, watched: bool = True) -> dict:
    """A cold `python -m train` (unsynced); watched=False: its ranks without the file watch (train/rank/observe.py)."""
    env = {**os.environ, **({} if watched else {SWITCH: "off"})}
    start_wall, start = time.time(), time.perf_counter()
    proc = psutil.Popen([sys.executable, "-m", "train", f"hydra.run.dir={run_dir}", "fix=unsynced",
                         f"skew.seconds={skew}", f"world_size={WORLD}", *extra], cwd=ROOT, env=env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = sample_rss(proc)
    wall = time.perf_counter() - start
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    first = first_events(run_dir) if (run_dir / "events").exists() else {}
    launch_start = first.get(("launcher", "launch_start"))
    rank_starts = [t for (rank, event), t in first.items() if event == "rank_start"]
    watched_s = [e["seconds"] for e in read_events(run_dir) if e["event"] == "file_watch"] if first else []
    return {"exit_code": proc.returncode, "wall_s": round(wall, 3), "launcher_peak_rss_mib": round(peak / 2**20, 1),
            "verdict": summary.get("verdict"), "run_dir": str(run_dir),
            # the rank that spent longest in the file watch's audit hook (train/rank/observe.py), over the run's wall
            "file_watch_share": round(max(watched_s) / wall, 5) if watched_s else None,
            "launcher_start_s": round(launch_start - start_wall, 3) if launch_start else None,
            "ranks_start_s": round(min(rank_starts) - launch_start, 3) if launch_start and rank_starts else None}


def plain_run(out_dir: Path, skew: float) -> dict:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD}",
                           str(PLAIN), "--skew", str(skew), "--out", str(out_dir)], cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "output.log").write_text(proc.stdout + proc.stderr)
    return {"exit_code": proc.returncode, "wall_s": round(wall, 3), "run_dir": str(out_dir),
            "loads": proc.stdout.count(": loaded"), "load_failures": proc.stdout.count(": load failed")}


def sweep(sweep_dir: Path, *overrides) -> dict:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "train", "-m", f"hydra.sweep.dir={sweep_dir}", *overrides],
                          cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "console.log").write_text(proc.stdout + proc.stderr)
    return {"exit_code": proc.returncode, "wall_s": round(wall, 3), "jobs": jobs_of(sweep_dir)}


def first_events(run_dir) -> dict:
    first = {}
    for e in read_events(run_dir):
        first.setdefault((e["rank"], e["event"]), e["t"])
    return first


def jobs_of(sweep_dir: Path) -> list:
    """Per job, in order: its verdict and timings from its events."""
    jobs = []
    for job in sorted((d for d in sweep_dir.iterdir() if d.is_dir() and d.name.split("-")[0].isdigit()),
                      key=lambda d: int(d.name.split("-")[0])):
        first = first_events(job) if (job / "events").exists() else {}
        summary = json.loads((job / "summary.json").read_text()) if (job / "summary.json").exists() else {}
        setups = [first[(r, "fit_start")] - first[(r, "rank_start")] for r in range(WORLD)
                  if (r, "fit_start") in first and (r, "rank_start") in first]
        jobs.append({"job": job.name, "verdict": summary.get("verdict"),
                     "fix": fix_name(summary.get("config") or {}),
                     "launch_start": first.get(("launcher", "launch_start")),
                     "launch_end": first.get(("launcher", "launch_end")),
                     "rank_setup_s": round(max(setups), 3) if setups else None})
    return jobs


def hang_to_end(run_dir: Path):
    """Seconds from the moment a run's hang was certain (its first hang event's certain_at) to its launch_end;
    None when the run recorded no hang."""
    events = read_events(run_dir) if (run_dir / "events").exists() else []
    hung = next((e for e in events if e["event"] == "hang"), None)
    end = next((e for e in events if e["event"] == "launch_end"), None)
    return round(end["t"] - hung["certain_at"], 3) if hung and end else None


def median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def launcher_imports(modules) -> bool:
    """Whether importing what `python -m train` imports pulls in any of these top-level packages."""
    code = ("import sys; sys.argv = ['train']; import train.launch.forkserver, train.launch.job, train.launch.sweep, train.report.environment; "
            f"print(any(m.split('.')[0] in {tuple(modules)!r} for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def launcher_imports_fastai() -> bool:
    return launcher_imports(("fastai",))


def framework_runs(out_dir: Path, name: str, repeats: int) -> dict:
    """A cold `python -m train framework=<name> fix=as_shipped` (2 ranks, no skew; FRAMEWORK_SCENARIO's keys where
    the default scenario is n/a) against the plain script of the same framework doing the same work under torchrun,
    alternately; their median walls. No ratio when a run failed (a single run without a verdict, a plain script
    that exited non-zero): a failed run is fast, not a figure."""
    singles, plains = [], []
    for i in range(repeats):
        singles.append(single_run(out_dir / f"{name}-single{i}", 0.0, [f"framework={name}", "fix=as_shipped",
                                                                         "world_size=2",
                                                                         *FRAMEWORK_SCENARIO.get(name, ())]))
        start = time.perf_counter()
        plain = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                str(ROOT / "bench" / f"plain_{name}.py"), "--out", str(out_dir / f"{name}-plain{i}")],
                               cwd=ROOT, capture_output=True, text=True)
        plains.append({"exit_code": plain.returncode, "wall_s": round(time.perf_counter() - start, 3)})
        print(f"  {name}: single {singles[-1]['wall_s']:6.2f} s ({singles[-1]['verdict']})   "
              f"plain torchrun {plains[-1]['wall_s']:6.2f} s (exit {plains[-1]['exit_code']})", flush=True)
    single, plain = median(r["wall_s"] for r in singles), median(r["wall_s"] for r in plains)
    failed = any(r["verdict"] is None for r in singles) or any(r["exit_code"] != 0 for r in plains)
    return {"single_runs": singles, "plain_runs": plains, "single_wall_s": single, "plain_wall_s": plain,
            "failed": failed, "ratio": round(single / plain, 3) if single and plain and not failed else None}


RAY_CELL = ("framework=ray_train", "scenario=shard_lost", "fix=as_shipped")  # a resume: one kill, Ray's restart
LOOP_CELL = ("framework=torch_loop", "scenario=crash_mid_save", "fix=in_place")  # the same, torch elastic's


def ray_cell_runs(out_dir: Path, repeats: int) -> dict:
    """A cold Ray Train cell (2 workers, one kill, Ray's restart) against a cold torch loop cell of the same shape,
    alternately; their median walls, and where the Ray cell's time goes from its events (the median of each): launch
    to its workers' first start (Ray and the worker group starting), the kill to the restarted workers' start, the
    workers' end to the launch's end (Ray Train's and Ray's shutdown)."""
    rays, loops, phases = [], [], []
    for i in range(repeats):
        rays.append(single_run(out_dir / f"ray{i}", 0.0, [*RAY_CELL, "world_size=2"]))
        loops.append(single_run(out_dir / f"loop{i}", 0.0, [*LOOP_CELL, "world_size=2"]))
        found = ray_phases(out_dir / f"ray{i}")
        if found:
            phases.append(found)
        print(f"  ray_train cell {rays[-1]['wall_s']:6.2f} s ({rays[-1]['verdict']})   torch_loop cell "
              f"{loops[-1]['wall_s']:6.2f} s ({loops[-1]['verdict']})", flush=True)
    ray, loop = median(r["wall_s"] for r in rays), median(r["wall_s"] for r in loops)
    failed = any(r["verdict"] is None for r in rays + loops)
    return {"ray_runs": rays, "loop_runs": loops, "ray_wall_s": ray, "loop_wall_s": loop,
            "phases_s": {k: median(round(p[k], 3) for p in phases) for k in ("start_s", "restart_s", "end_s")},
            "ratio": round(ray / loop, 3) if ray and loop and not failed else None}


def ray_phases(run_dir: Path):
    """A Ray Train cell's phases from its events (seconds), or None for a run that did not restart and end."""
    events = read_events(run_dir) if (run_dir / "events").exists() else []
    first = {}
    for e in events:
        first.setdefault((e["event"], e.get("attempt")), e["t"])
    ends = [e["t"] for e in events if e["event"] == "rank_end"]
    needed = [("launch_start", None), ("rank_start", 0), ("crash", 0), ("rank_start", 1), ("launch_end", None)]
    if not ends or any(k not in first for k in needed):
        return None
    return {"start_s": first["rank_start", 0] - first["launch_start", None],
            "restart_s": first["rank_start", 1] - first["crash", 0], "end_s": first["launch_end", None] - max(ends)}


def events_below(root: Path) -> list:
    """Every event of every rank and launcher under root (a run, a sweep, a nodes run's node dirs)."""
    found = []
    for path in glob.glob(f"{root}/**/events/*.jsonl", recursive=True):
        for line in Path(path).read_text().splitlines():
            if line.endswith("}"):
                found.append({**json.loads(line), "file": path})
    return found


def ignore_sigint():
    """As a non-interactive shell starts `race-lab ... &`: SIGINT ignored, inherited by what it execs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def sigint_at(root: Path, args: list, when, after: float, *, whole_group: bool = True, sigint_ignored=False,
              env=None):
    """Start `python -m train args` in its own process group (SIGINT ignored, as a shell's background job gets it,
    if sigint_ignored); once `when(events under root)` holds, wait `after` s and send SIGINT to the group (a
    terminal's Ctrl-C) or to the launcher alone. Returns (exit code, seconds from the signal to the exit, the time
    it was sent, the console output). Whatever happens, nothing it started is left running."""
    proc = subprocess.Popen([sys.executable, "-m", "train", *args], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            preexec_fn=ignore_sigint if sigint_ignored else None)
    try:
        deadline = time.time() + 240
        while not when(events_below(root)):
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended before the point of interrupt: {proc.communicate()[0][-2000:]}")
            if time.time() > deadline:
                raise RuntimeError("the run never got to the point of interrupt")
            time.sleep(0.05)
        time.sleep(after)
        sent = time.time()
        if whole_group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        return proc.returncode, time.time() - sent, sent, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def both_fitting(events) -> bool:
    return {(e["rank"], e["event"]) for e in events} >= {(0, "fit_start"), (1, "fit_start")}


# make bench's interrupts: SIGINT to the group (a terminal's Ctrl-C) at three moments of a run and a check
INTERRUPTS = {
    "start-up": (["world_size=2"], lambda events: True, 0.3),  # the launcher still composing, started as `&` does
    "mid-run": (["world_size=2", "skew.seconds=3"], both_fitting, 0.0),
    "mid-check": (["check", "framework=torch_loop", "check.repeats=1"],
                  lambda events: any(e["event"] == "rank_start" for e in events), 1.0),
}


def interrupt_runs(out_dir: Path, repeats: int) -> dict:
    """Per moment of INTERRUPTS, `repeats` times: the exit code and the seconds from the signal to the exit."""
    runs = {}
    for moment, (args, when, after) in INTERRUPTS.items():
        for i in range(repeats):
            root = out_dir / f"{moment}{i}"
            where = f"hydra.sweep.dir={root}" if args[0] == "check" else f"hydra.run.dir={root}"
            rc, took, _, _ = sigint_at(root, [*args, where], when, after, sigint_ignored=moment == "start-up")
            runs.setdefault(moment, []).append({"exit_code": rc, "stop_s": round(took, 3)})
    return runs
