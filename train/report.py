"""Turn run dirs into tables. Reads only the files runs write (summary.json), so it
works on runs copied back from another machine.

  python -m train.report --compare RUN_DIR RUN_DIR ...   verdicts side by side
"""
import argparse
import json
import sys
from pathlib import Path


def load_summary(run_dir) -> dict:
    path = Path(run_dir) / "summary.json"
    if not path.exists():
        raise SystemExit(f"error: {path} not found (not a finished run dir?)")
    return json.loads(path.read_text())


def rank_cell(rank: dict) -> str:
    lead = rank["timings"].get("load_after_save_end")
    return rank["outcome"] + (f" ({lead:+.2f} s)" if lead is not None else "")


def compare(run_dirs) -> str:
    """One column per run: variant, verdict, then each rank's outcome and load time vs the save's end."""
    summaries = [load_summary(d) for d in run_dirs]
    header = ["", *(s["config"]["callback"]["name"] for s in summaries)]
    rows = [header,
            ["skew", *(f"rank {s['config']['skew']['rank']}: {s['config']['skew']['seconds']} s" for s in summaries)],
            ["verdict", *(s["verdict"] for s in summaries)]]
    for rank in range(max(len(s["ranks"]) for s in summaries)):
        rows.append([f"rank {rank}", *(rank_cell(s["ranks"][rank]) if rank < len(s["ranks"]) else "-"
                                       for s in summaries)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append("(rank: outcome (when its load started, relative to the end of the last save))")
    for s in summaries:
        lines.append(f"{s['config']['callback']['name']}: {s['explanation']}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m train.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", nargs="+", metavar="RUN_DIR", required=True)
    args = parser.parse_args(argv)
    print(compare(args.compare))


if __name__ == "__main__":
    sys.exit(main())
