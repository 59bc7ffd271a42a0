"""Benchmark: time to verdict, each figure beside its goal (issue 9), recorded to a file.

  python -m train.bench [--repeats 3] [--jobs 10] [--skew 3] [--only single,sweep,barrier,hang,interrupt,frameworks,ray,nodes,matrix,cluster]
                         [--frameworks lightning,transformers,accelerate,deepspeed]
  (make bench)

- single: `python -m train` (unsynced, skew, 3 ranks; a cold process) and the plain script
  bench/plain_torchrun.py under `torchrun --standalone --nproc_per_node=3`, run alternately, --repeats
  times each; the ratio of their median walls. The launcher's resident memory is sampled every 20 ms
  (the launcher alone, not its ranks or forkserver), and its cold start read from the run's events. What
  observing costs, twice: paired, each cold run beside the same run with RACE_LAB_FILE_WATCH=off (no audit hook in
  its ranks; which of the two goes first alternates), the median of the pairs' wall ratios minus 1; and the time
  the rank longest in the file watch's audit hook spent there (its file_watch event, train/rank/observe.py timing
  itself), over the run's wall.
- sweep: one --jobs-job sweep (`-m skew.seconds=S fix=unsynced 'repeat=range(N)'`): its wall
  against N single runs, the overhead a job adds to its skew, and from the events of its warm jobs
  (all but the first) each rank's set-up (rank_start to fit_start) and the time between jobs
  (one job's launch_end to the next one's launch_start).
- barrier: a sweep of fix=unsynced,barrier at the same skew, --repeats + 1 each: the median wall
  of its warm jobs (launch_start to launch_end) with the barrier minus without it.
- hang: a sweep of scenario=disagree fix=barrier (2 ranks), --repeats jobs: rank 0 waits in a barrier that
  rank 1 went past. Per job, from its events, the moment the hang was certain (the hang event's certain_at:
  rank 0 in the barrier and rank 1 at the end, train/toolkit/hang.py) to the run's end (launch_end); the median.
- interrupt: a terminal's Ctrl-C (SIGINT to the whole process group), --repeats times at each of three moments:
  0.3 s into start-up (started as a shell's `&` starts it, SIGINT ignored), a run's two ranks fitting (skew 3 s),
  and a check (framework=torch_loop) 1 s after its first rank started. Seconds from the signal to the exit; the
  figure is the slowest moment's median, only when every one exited 130.
- frameworks: for Lightning, the Trainer, Accelerate and DeepSpeed (--frameworks picks some), a cold
  `python -m train framework=<name> fix=as_shipped` (2 ranks) against bench/plain_<name>.py under torchrun,
  alternately, --repeats times.
- ray: a cold Ray Train cell (framework=ray_train scenario=shard_lost, 2 workers: one kill, Ray's restart) against a
  cold torch loop cell of the same shape (crash_mid_save, torch elastic's restart), alternately, --repeats times;
  the ratio of their median walls, and where the Ray cell's time goes (start, restart, end).
- nodes: a sweep (JOBS=1) alternating a one-node cell (scenario=seed) and the two-node cell (scenario=no_shared_fs:
  two torch elastic agents on this host, each node's disk its own tmpfs), fastai, fix=broadcast, 2 ranks, at
  one skew, --repeats + 1 of each: per job, launch_start to its summary.json; the median two-node job minus the
  median warm one-node job (the first job, which waits for the forkserver's preload, left out), and where the
  two-node job's time goes (its node agents' launch_start, the first rank_start, the last rank_end, the agents'
  launch_end), the median of each.
- matrix: a subset of the matrix (--matrix-scenarios x --matrix-fixes, one repeat) as `make matrix` runs it,
  at the default JOBS (one job per core, side by side) and at JOBS=1 (one after another, the floor of
  what side by side saves): each wall, the jobs' verdicts, and the load of the machine around them.
- cluster: the same sweep of --jobs jobs on the joblib launcher, on a 1-node and a 2-node Ray cluster started on
  this host (train/bench/ray_cluster.py): the Ray launcher's per-job overhead, and the 1-node and 2-node walls.
- the launcher imports no framework: checked in a fresh process that imports what `python -m train` does.

Figures go to runs/bench/<time>/bench.json with the machine's cores and the versions. Speed goals
live here, not in the tests: timings on a shared machine are noisy.
"""
import argparse
import json
import os
import platform
from datetime import datetime

import psutil

from train.bench.measure import (
    FRAMEWORK_MODULES,
    ROOT,
    WORLD,
    default_jobs,
    framework_runs,
    hang_to_end,
    interrupt_runs,
    launcher_imports,
    launcher_imports_fastai,
    matrix_run,
    median,
    nodes_run,
    plain_run,
    ray_cell_runs,
    single_run,
    sweep,
)

# figure -> (goal, how it compares, unit, what it is)
GOALS = {
    "single_vs_plain_ratio": (0.6, "<=", "x", "cold single run / plain torchrun script (median walls)"),
    "rank_setup_s": (0.5, "<=", "s", "per-rank set-up in a warm job, rank_start to fit_start (median of each job's slowest rank)"),
    "between_jobs_s": (0.3, "<=", "s", "between jobs, launch_end to the next launch_start (median)"),
    "sweep_vs_singles_ratio": (0.4, "<=", "x", "sweep wall / (jobs x median single run)"),
    "sweep_overhead_per_job_s": (1.5, "<=", "s", "sweep wall / jobs - skew"),
    "barrier_cost_s": (0.1, "<=", "s", "barrier job wall - unsynced job wall at equal skew (medians)"),
    "hang_to_end_s": (2.0, "<=", "s", "a hang certain (a peer went past the barrier) to the run's end, disagree x barrier (median)"),
    "two_node_above_one_node_s": (2.0, "<=", "s", "two-node cell (no_shared_fs, own disks) - one-node cell (seed), same "
                                                  "skew, warm jobs of one sweep, launch_start to summary (medians)"),
    "file_watch_share": (0.05, "<=", "", "the rank longest in the file watch's audit hook (what every rank records of "
                                         "checkpoint files), its time there / the single run's wall (median)"),
    "file_watch_paired_cost": (0.05, "<=", "", "a cold single run's wall with the file watch over the same run's "
                                               "without it (RACE_LAB_FILE_WATCH=off), minus 1: median of the pairs"),
    "interrupt_to_exit_s": (2.0, "<=", "s", "Ctrl-C (SIGINT to the process group) to the exit, at start-up, mid-run "
                                            "and mid-check: the slowest moment's median"),
    "launcher_imports_fastai": (False, "==", "", "the launcher imports fastai"),
    "launcher_imports_a_framework": (False, "==", "", "the launcher imports fastai, Lightning, transformers, "
                                                      "Accelerate or DeepSpeed"),
    "ray_launcher_overhead_per_job_s": (0.5, "<=", "s", "hydra/launcher=ray on a 1-node cluster of 4 CPUs against the "
                                                        "joblib launcher at 2 jobs at a time: (wall - wall) / jobs"),
    "ray_cell_vs_loop_cell_ratio": (3.0, "<=", "x", "a cold Ray Train cell (shard_lost: a kill, Ray's restart) / a cold "
                                                    "torch loop cell of the same shape (crash_mid_save): median walls"),
    **{f"{name}_single_vs_plain_ratio": (0.6, "<=", "x", f"framework={name}: cold single run / plain torchrun "
                                                          f"script bench/plain_{name}.py (median walls)")
       for name in ("lightning", "transformers", "accelerate", "deepspeed")},
}
FRAMEWORKS = ("lightning", "transformers", "accelerate", "deepspeed")  # each against bench/plain_<name>.py
INFO = {
    "single_wall_s": "cold single run wall (median)",
    "plain_wall_s": "plain torchrun script wall (median)",
    "launcher_start_s": "cold run: launcher process start to launch_start (median)",
    "ranks_start_s": "cold run: launch_start to the first rank_start (median)",
    "sweep_wall_s": "sweep wall",
    "launcher_peak_rss_mib": "launcher peak resident memory (max over cold runs)",
    "ray_cell_s": "ray: a cold Ray Train cell's wall (median)",
    "ray_start_s": "ray: launch to the workers' first start (median)",
    "ray_restart_s": "ray: the kill to the restarted workers' start (median)",
    "ray_end_s": "ray: the workers' end to the launch's end (median)",
    "ray_1_node_sweep_s": "cluster: the sweep's wall on a 1-node Ray cluster (4 CPUs)",
    "ray_2_nodes_sweep_s": "cluster: the same on a 2-node Ray cluster (2 CPUs each; the same 2 cores here)",
    "joblib_sweep_s": "cluster: the same on the joblib launcher, 2 jobs at a time",
    "one_node_job_s": "nodes: one-node job (seed), launch_start to summary (median of warm jobs)",
    "two_node_job_s": "nodes: two-node job (no_shared_fs), launch_start to summary (median)",
    "matrix_wall_s": "matrix subset wall, side by side at make matrix's default JOBS (one more than cores)",
    "matrix_wall_jobs1_s": "matrix subset wall, JOBS=1 (one job after another)",
    "matrix_floor_s": "matrix subset floor: every job's training with its stalls (rank 0's fit_start to train_end) "
                      "over the cores, plus the start-up to the first rank_start",
}
MATRIX_SCENARIOS, MATRIX_FIXES = "seed,stale,torn,disagree", "unsynced,barrier,atomic,agreed"


def versions() -> dict:
    from importlib import metadata

    def version(package):
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None
    return {"python": platform.python_version(),
            **{p: version(p) for p in ("torch", "fastai", "pytorch-lightning", "transformers", "accelerate",
                                       "deepspeed", "hydra-core", "scikit-learn")}}


def met(name, value):
    goal, op, _, _ = GOALS[name]
    if value is None:
        return None
    return value == goal if op == "==" else value <= goal


def show(name, value) -> str:
    goal, op, unit, what = GOALS[name]
    ok = met(name, value)
    mark = "-" if ok is None else ("met" if ok else "MISSED")
    shown = "-" if value is None else (f"{value}" if isinstance(value, bool) else f"{value:.2f}{unit and ' ' + unit}")
    return f"  {shown:>10}   goal {op} {goal}{unit and ' ' + unit:<4}  {mark:<6}  {what}"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m train.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="single runs, plain runs, and barrier/unsynced jobs")
    parser.add_argument("--jobs", type=int, default=10, help="jobs in the sweep")
    parser.add_argument("--skew", type=float, default=3.0)
    parser.add_argument("--only", default="single,sweep,barrier,hang,interrupt,frameworks,ray,nodes,matrix,cluster",
                        help="which parts to run")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                        help="which frameworks --only frameworks runs against their plain scripts")
    parser.add_argument("--matrix-scenarios", default=MATRIX_SCENARIOS, help="the matrix subset's scenarios")
    parser.add_argument("--matrix-fixes", default=MATRIX_FIXES, help="the matrix subset's fixes")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for the single runs")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    out_dir = ROOT / "runs" / "bench" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    out_dir.mkdir(parents=True)
    figures, record = {}, {"args": vars(args), "started": datetime.now().isoformat(timespec="seconds")}
    print(f"bench: {os.cpu_count()} cores ({psutil.cpu_count(logical=False)} physical), load average "
          f"{os.getloadavg()[0]:.2f}; figures into {out_dir}", flush=True)

    if "single" in parts:
        singles, unwatched, plains = [], [], []
        for i in range(args.repeats):  # alternately, so a busy spell of the machine hits each; the pair in turns
            pair = [(singles, "single", True), (unwatched, "unwatched", False)]
            for runs, name, watched in pair if i % 2 == 0 else pair[::-1]:
                runs.append(single_run(out_dir / f"{name}{i}", args.skew, args.overrides, watched))
            plains.append(plain_run(out_dir / f"plain{i}", args.skew))
            print(f"  single {singles[-1]['wall_s']:6.2f} s ({singles[-1]['verdict']})   unwatched "
                  f"{unwatched[-1]['wall_s']:6.2f} s   plain torchrun {plains[-1]['wall_s']:6.2f} s", flush=True)
        record.update(single_runs=singles, unwatched_runs=unwatched, plain_runs=plains)
        figures["file_watch_paired_cost"] = median(round(w["wall_s"] / u["wall_s"] - 1, 4)
                                                   for w, u in zip(singles, unwatched))
        figures["single_wall_s"] = median(r["wall_s"] for r in singles)
        figures["plain_wall_s"] = median(r["wall_s"] for r in plains)
        figures["single_vs_plain_ratio"] = round(figures["single_wall_s"] / figures["plain_wall_s"], 3)
        figures["launcher_start_s"] = median(r["launcher_start_s"] for r in singles)
        figures["ranks_start_s"] = median(r["ranks_start_s"] for r in singles)
        figures["launcher_peak_rss_mib"] = max(r["launcher_peak_rss_mib"] for r in singles)
        figures["file_watch_share"] = median(r["file_watch_share"] for r in singles)

    if "sweep" in parts:
        run = sweep(out_dir / "sweep", f"skew.seconds={args.skew}", "fix=unsynced", f"world_size={WORLD}",
                    f"repeat=range({args.jobs})")
        print(f"  sweep of {args.jobs} jobs {run['wall_s']:6.2f} s", flush=True)
        record["sweep"] = run
        jobs = run["jobs"]
        warm = jobs[1:]
        figures["sweep_wall_s"] = run["wall_s"]
        figures["rank_setup_s"] = median(j["rank_setup_s"] for j in warm)
        figures["between_jobs_s"] = median(b["launch_start"] - a["launch_end"] for a, b in zip(jobs, jobs[1:])
                                           if a["launch_end"] and b["launch_start"])
        figures["sweep_overhead_per_job_s"] = round(run["wall_s"] / args.jobs - args.skew, 3)
        if figures.get("single_wall_s"):
            figures["sweep_vs_singles_ratio"] = round(run["wall_s"] / (args.jobs * figures["single_wall_s"]), 3)

    if "barrier" in parts:
        run = sweep(out_dir / "barrier", f"skew.seconds={args.skew}", "fix=unsynced,barrier",
                    f"world_size={WORLD}", f"repeat=range({args.repeats + 1})")
        record["barrier_sweep"] = run
        warm = run["jobs"][1:]  # the first job pays the forkserver's start

        def job_wall(fix):
            return median(j["launch_end"] - j["launch_start"] for j in warm
                          if j["fix"] == fix and j["launch_end"] and j["launch_start"])
        record["barrier_job_wall_s"], record["unsynced_job_wall_s"] = job_wall("barrier"), job_wall("unsynced")
        if record["barrier_job_wall_s"] and record["unsynced_job_wall_s"]:
            figures["barrier_cost_s"] = round(record["barrier_job_wall_s"] - record["unsynced_job_wall_s"], 3)
        print(f"  barrier job {record['barrier_job_wall_s']} s, unsynced job {record['unsynced_job_wall_s']} s",
              flush=True)

    if "hang" in parts:
        run = sweep(out_dir / "hang", "scenario=disagree", "fix=barrier", "world_size=2",
                    f"repeat=range({args.repeats})")
        ends = [hang_to_end(out_dir / "hang" / j["job"]) for j in run["jobs"]]
        record.update(hang_sweep=run, hang_to_end_runs_s=ends)
        figures["hang_to_end_s"] = median(ends)
        print(f"  hang certain to the run's end: {ends} s", flush=True)

    if "interrupt" in parts:
        runs = interrupt_runs(out_dir / "interrupt", args.repeats)
        record["interrupt_runs"] = runs
        stops = {moment: median(r["stop_s"] for r in rs) for moment, rs in runs.items()}
        if all(r["exit_code"] == 130 for rs in runs.values() for r in rs):  # a stop that was not one is no figure
            figures["interrupt_to_exit_s"] = max(stops.values())
        print(f"  Ctrl-C to the exit: {stops} s (exit codes "
              f"{sorted({r['exit_code'] for rs in runs.values() for r in rs})})", flush=True)

    if "frameworks" in parts:
        for name in args.frameworks.split(","):
            record[f"{name}_runs"] = runs = framework_runs(out_dir, name, args.repeats)
            figures[f"{name}_single_vs_plain_ratio"] = runs["ratio"]

    if "ray" in parts:
        record["ray"] = run = ray_cell_runs(out_dir / "ray", args.repeats)
        figures["ray_cell_vs_loop_cell_ratio"], figures["ray_cell_s"] = run["ratio"], run["ray_wall_s"]
        for phase in ("start", "restart", "end"):
            figures[f"ray_{phase}_s"] = run["phases_s"][f"{phase}_s"]

    if "cluster" in parts:
        from train.bench.ray_cluster import cluster_runs

        record["cluster"] = run = cluster_runs(out_dir / "cluster", args.jobs)
        figures["ray_launcher_overhead_per_job_s"] = run["per_job_overhead_s"]
        for name in ("ray_1_node", "ray_2_nodes", "joblib"):
            figures[f"{name}_sweep_s"] = run[name]["wall_s"]
        print(f"  cluster: {', '.join(f'{n} {run[n]}' for n in ('joblib', 'ray_1_node', 'ray_2_nodes'))}", flush=True)

    if "nodes" in parts:
        run = nodes_run(out_dir / "nodes", args.repeats, 0.0)
        record["nodes"] = run
        figures["one_node_job_s"], figures["two_node_job_s"] = run["one_node_job_s"], run["two_node_job_s"]
        if run["one_node_job_s"] is not None and run["two_node_job_s"] is not None:
            figures["two_node_above_one_node_s"] = round(run["two_node_job_s"] - run["one_node_job_s"], 3)
        print(f"  nodes: one-node job {run['one_node_job_s']} s, two-node job {run['two_node_job_s']} s "
              f"(phases {run['two_node_phases_s']}; load {run['load_before']} -> {run['load_after']})", flush=True)

    if "matrix" in parts:  # JOBS=1 first: the side-by-side run then does not meet a cold page cache alone
        floor = matrix_run(out_dir / "matrix-jobs1", 1, args.matrix_scenarios, args.matrix_fixes)
        jobs = default_jobs()
        side = matrix_run(out_dir / f"matrix-jobs{jobs}", jobs, args.matrix_scenarios, args.matrix_fixes)
        record["matrix"] = {"scenarios": args.matrix_scenarios, "fixes": args.matrix_fixes, "jobs1": floor,
                            "default_jobs": side}
        figures["matrix_wall_jobs1_s"], figures["matrix_wall_s"] = floor["wall_s"], side["wall_s"]
        figures["matrix_floor_s"] = side["floor_s"]
        print(f"  matrix subset: JOBS=1 {floor['wall_s']:6.2f} s {floor['verdicts']}   "
              f"JOBS={jobs} {side['wall_s']:6.2f} s {side['verdicts']}   floor {side['floor_s']} s", flush=True)

    figures["launcher_imports_fastai"] = launcher_imports_fastai()
    figures["launcher_imports_a_framework"] = launcher_imports(FRAMEWORK_MODULES)
    record.update(figures=figures, goals={k: {"goal": g, "op": op, "unit": u, "what": w, "met": met(k, figures.get(k))}
                                          for k, (g, op, u, w) in GOALS.items()},
                  machine={"host": platform.node(), "cores": os.cpu_count(),
                           "physical_cores": psutil.cpu_count(logical=False),
                           "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
                           "load_average_at_end": os.getloadavg(), "platform": platform.platform()},
                  versions=versions())
    (out_dir / "bench.json").write_text(json.dumps(record, indent=2) + "\n")

    print(f"\nfigures (this machine: {os.cpu_count()} cores; medians of {args.repeats} where repeated)")
    for name in GOALS:
        print(show(name, figures.get(name)))
    for name, what in INFO.items():
        if figures.get(name) is not None:
            unit = "MiB" if name.endswith("mib") else "s"
            print(f"  {figures[name]:>8.2f} {unit:<3}                          {what}")
    print(f"recorded in {out_dir / 'bench.json'}")
