"""Benchmark: wall time and the launcher's peak memory of `python -m train`, recorded to a file.

  python -m train.bench [--repeats N] [hydra overrides ...]     (make bench)

Each repeat runs the launcher as a user does, samples its resident memory every 20 ms
(the launcher alone, not its ranks or forkserver) and times it; the figures go to
runs/bench/<time>.json. Speed goals live here, not in the tests.
"""
import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import psutil


def measure(overrides, run_dir: Path) -> dict:
    start = time.perf_counter()
    proc = psutil.Popen([sys.executable, "-m", "train", f"hydra.run.dir={run_dir}", *overrides],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, proc.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    wall = time.perf_counter() - start
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    return {"exit_code": proc.returncode, "wall_s": round(wall, 2), "launcher_peak_rss_mib": round(peak / 2**20, 1),
            "verdict": summary.get("verdict"), "run_dir": str(run_dir)}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m train.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run")
    args = parser.parse_args(argv)
    out_dir = Path("runs/bench") / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    runs = [measure(args.overrides, out_dir / f"run{i}") for i in range(args.repeats)]
    walls = [r["wall_s"] for r in runs]
    record = {"overrides": args.overrides, "runs": runs, "median_wall_s": statistics.median(walls),
              "max_launcher_peak_rss_mib": max(r["launcher_peak_rss_mib"] for r in runs),
              "host": platform.node(), "cpus": psutil.cpu_count(), "python": platform.python_version()}
    (out_dir / "bench.json").write_text(json.dumps(record, indent=2) + "\n")
    for r in runs:
        print(f"wall {r['wall_s']:6.2f} s   launcher peak RSS {r['launcher_peak_rss_mib']:6.1f} MiB   "
              f"verdict {r['verdict']}   exit {r['exit_code']}")
    print(f"median wall {record['median_wall_s']} s; figures in {out_dir / 'bench.json'}")


if __name__ == "__main__":
    sys.exit(main())
