"""python -m train.report: the command line."""
import argparse
import sys
from pathlib import Path

from train.report.console import align
from train.report.rejudge import rejudge
from train.report.run_records import fix_name, load_summary
from train.report.runs import write_report


def skew_cell(skew: dict) -> str:
    where = f" + rank 0: {skew['mid_write_s']} s mid-write" if skew.get("mid_write_s") else ""
    return f"rank {skew['rank']}: {skew['seconds']} s{where}"


def rank_cell(rank: dict) -> str:
    lead = rank["timings"].get("load_after_save_end")
    return rank["outcome"] + (f" ({lead:+.2f} s)" if lead is not None else "")


def compare(run_dirs) -> str:
    """One column per run: fix, verdict, then each rank's outcome and load time vs the save's end."""
    summaries = [load_summary(d) for d in run_dirs]
    header = ["", *(fix_name(s["config"]) for s in summaries)]
    rows = [header,
            ["skew", *(skew_cell(s["config"]["skew"]) for s in summaries)],
            ["verdict", *(s["verdict"] for s in summaries)]]
    for rank in range(max(len(s["ranks"]) for s in summaries)):
        rows.append([f"rank {rank}", *(rank_cell(s["ranks"][rank]) if rank < len(s["ranks"]) else "-"
                                       for s in summaries)])
    lines = [align(rows), "(rank: outcome (when its load started, relative to the end of the last save))"]
    for s in summaries:
        lines.append(f"{fix_name(s['config'])}: {s['explanation']}")
    return "\n".join(lines)


def merge_main(dirs, out):
    from train.config import ConfigError
    from train.report.node_records import merge, print_merged, read_node

    try:
        out = out or Path("runs/merged") / read_node(dirs[0])["rdzv"]["id"]
        if out.exists() and any(out.iterdir()):
            raise ConfigError(f"--out {out}: not empty; the merge writes a new run dir")
        summary = merge([Path(d) for d in dirs], out)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_merged(summary, out)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m train.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", nargs="?", help="a run dir or a sweep dir")
    parser.add_argument("--compare", nargs="+", metavar="RUN_DIR", help="print these runs' verdicts side by side")
    parser.add_argument("--merge", nargs="+", metavar="NODE_DIR", help="every node's run dir of one multi-node run "
                        "-> one summary.json with one verdict (in --out)")
    parser.add_argument("--out", type=Path, help="where --merge writes (default: runs/merged/<rdzv id>)")
    parser.add_argument("--rejudge", action="store_true", help="judge DIR's runs again from their events with "
                        "today's judge (their summary.json rewritten), then rebuild the report")
    args = parser.parse_args(argv)
    if args.merge:
        return merge_main(args.merge, args.out)
    if args.compare:
        print(compare(args.compare))
    elif args.dir:
        if not Path(args.dir).is_dir():
            parser.error(f"{args.dir}: not a directory")
        if args.rejudge:
            for run, before, after in rejudge(Path(args.dir)):
                print(f"rejudged {run}: {before} -> {after}")
        print(write_report(args.dir))
    else:
        parser.error("give a run or sweep dir, or --compare RUN_DIR ...")
