"""Verdict stability: the seed scenario N times with each fix, counted.

  python -m train.report.stability [--runs N] [--fixes unsynced,barrier] [hydra overrides ...]   (make stability N=50)

Runs one Hydra multirun (every fix x repeat=range(N)), then prints how often each verdict came out
per fix and whether the last saved weights had one digest in every run, and writes the same into
stability.json in the sweep dir. Exits 1 unless every fix gave one verdict every time.
"""
import argparse
import json
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

from train.events import read_events
from train.judge.vocabulary import saves
from train.report.run_records import find_runs, fix_name, load_summary


def tally(root: Path) -> dict:
    verdicts, digests = {}, Counter()
    for run in find_runs(root):
        summary = load_summary(run)
        verdicts.setdefault(fix_name(summary["config"]), Counter())[summary["verdict"]] += 1
        written = saves(read_events(run))
        digests[written[-1]["digest"] if written else None] += 1
    return {"verdicts": {fix: dict(counts) for fix, counts in verdicts.items()}, "saved_digests": dict(digests)}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m train.report.stability", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50, help="runs per fix")
    parser.add_argument("--fixes", "--variants", dest="fixes", default="unsynced,barrier",
                        help="the fixes, comma-separated (--variants: its old name)")
    parser.add_argument("--dir", type=Path, default=None, help="the sweep dir (default runs/stability/<time>)")
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides for every run")
    args = parser.parse_args(argv)
    root = args.dir or Path("runs/stability") / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    sweep = subprocess.run([sys.executable, "-m", "train", "-m", f"hydra.sweep.dir={root}",
                            f"fix={args.fixes}", f"repeat=range({args.runs})",
                            *args.overrides], stdout=subprocess.DEVNULL)
    if sweep.returncode not in (0, 1) or not root.exists():
        raise SystemExit(f"error: the sweep failed (exit {sweep.returncode}); see {root}")
    result = {"runs_per_fix": args.runs, **tally(root)}
    (root / "stability.json").write_text(json.dumps(result, indent=2) + "\n")
    for fix, counts in result["verdicts"].items():
        print(f"{fix:10} " + ", ".join(f"{n}/{sum(counts.values())} {v}" for v, n in counts.items()))
    digests = result["saved_digests"]
    print(f"saved weights: {len(digests)} digest(s) over {sum(digests.values())} runs: "
          + ", ".join(f"{d} x{n}" for d, n in digests.items()))
    print(f"figures in {root / 'stability.json'}")
    stable = all(len(c) == 1 for c in result["verdicts"].values()) and len(digests) == 1
    return 0 if stable else 1


if __name__ == "__main__":
    sys.exit(main())
