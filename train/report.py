"""Turn runs into a report. Reads only the files runs write (summary.json, events/,
.hydra/), so it works on a sweep copied back from another machine.

  python -m train.report DIR                   a run or sweep dir -> report.csv, report.md,
                                               race_vs_skew.png, and timeline.png in each run
  python -m train.report --compare RUN RUN ..  verdicts side by side
"""
import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

import yaml

from train import rates
from train.events import read_events
from train.matrix import write_matrix
from train.outcomes import OUTCOMES, saves
from train.summary import align, save_png_atomic

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
FIELDS = ["job", "scenario", "framework", "variant", "skew_s", "skew_rank", "world_size", "epochs", "seed", "repeat", "status",
          "verdict", "replicas", *(f"n_{o}" for o in OUTCOMES), "nonsaver_wait_s",
          "nonsaver_read_vs_save_end_s", "wall_s", "note"]


def load_summary(run_dir) -> dict:
    path = Path(run_dir) / "summary.json"
    if not path.exists():
        raise SystemExit(f"error: {path} not found (not a finished run dir?)")
    return json.loads(path.read_text())


def find_runs(root: Path) -> list:
    """Run dirs (each has .hydra/) at or below root, in job order; a node's own dir inside a run
    (nodes/node<K>/, launch.all_nodes_here) is part of that run, not one of its own."""
    found = {p.parent for p in root.rglob(".hydra") if p.is_dir()}
    runs = [r for r in found if not any(parent in found for parent in r.parents)]

    def order(run):
        rel = run.relative_to(root).parts
        head = rel[0].split("-")[0] if rel else ""
        return (int(head) if head.isdigit() else -1, str(run))
    return sorted(runs, key=order)


def _median(values):
    return round(statistics.median(values), 3) if values else ""


def unreadable(e: BaseException) -> str:
    """Why a record could not be used, in a few words."""
    if isinstance(e, json.JSONDecodeError):
        return "summary.json is not whole JSON"
    if isinstance(e, FileNotFoundError):
        return f"no {Path(e.filename).name if e.filename else 'file'}"
    return f"{type(e).__name__}: {str(e)[:80]}"


def read_summary(run: Path):
    """summary.json as a dict, or None where there is none, or one cut short (a crash while writing)."""
    try:
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and {"config", "status", "verdict", "ranks"} <= set(summary) else None


def run_row(root: Path, run: Path, events: list) -> dict:
    """One CSV row. A job with no summary.json crashed before it could record a verdict."""
    s = read_summary(run)
    if s is not None:
        cfg, status, verdict, ranks = s["config"], s["status"], s["verdict"], s["ranks"]
        note = s["explanation"] if verdict == "n/a" else ""
    else:
        cfg = yaml.safe_load((run / ".hydra/config.yaml").read_text())
        cfg["scenario"] = yaml.safe_load((run / ".hydra/hydra.yaml").read_text())["hydra"]["runtime"]["choices"] \
            .get("scenario") if (run / ".hydra/hydra.yaml").exists() else None
        status, verdict, ranks, note = "crashed", "crashed", [], ""
        s = {}
    written = saves(events)
    saver = written[-1]["rank"] if written else 0
    others = [r["timings"] for r in ranks if r["rank"] != saver]
    ends = {e["event"]: e["t"] for e in events if e["rank"] == "launcher"}
    row = {
        "job": str(run.relative_to(root)), "scenario": cfg.get("scenario") or "seed",
        "framework": (cfg.get("framework") or {}).get("name", "fastai"), "variant": cfg["callback"]["name"], "skew_s": cfg["skew"]["seconds"],
        "skew_rank": cfg["skew"]["rank"], "world_size": cfg["world_size"], "epochs": cfg["epochs"],
        "seed": cfg["seed"], "repeat": cfg.get("repeat", 0), "status": status, "verdict": verdict,
        "replicas": s.get("replicas", ""), **{f"n_{o}": sum(r["outcome"] == o for r in ranks) for o in OUTCOMES},
        "nonsaver_wait_s": _median([t["wait"] for t in others if "wait" in t]),
        "nonsaver_read_vs_save_end_s": _median([t["load_after_save_end"] for t in others
                                                if "load_after_save_end" in t]),
        "wall_s": round(ends["launch_end"] - ends["launch_start"], 3)
        if {"launch_start", "launch_end"} <= set(ends) else "", "note": note,
    }
    return row


def variant_of(row) -> str:
    """The fix, named with its framework where that is not fastai: lightning:as_shipped."""
    framework = row.get("framework", "fastai")
    return row["variant"] if framework == "fastai" else f"{framework}:{row['variant']}"


def aggregate(rows) -> list:
    """Per (scenario, variant, world size, skew): runs, races out of the runs that gave a verdict with
    its 95% interval, the runs not counted (rates.NOT_COUNTED), outcome counts and median waits."""
    groups = {}
    for row in rows:
        if row["verdict"] != "n/a":
            groups.setdefault((row["scenario"], variant_of(row), row["world_size"], float(row["skew_s"])),
                              []).append(row)
    out = []
    for (scenario, variant, ws, skew), group in sorted(groups.items()):
        counted = [r for r in group if r["verdict"] not in rates.NOT_COUNTED]
        races = sum(r["verdict"] == "race" for r in counted)
        low, high = rates.interval(races, len(counted)) if counted else (None, None)
        counts = {o: sum(r[f"n_{o}"] for r in counted) for o in OUTCOMES}
        out.append({
            "scenario": scenario, "variant": variant, "world_size": ws, "skew_s": skew, "runs": len(group),
            "counted": len(counted), "races": races,
            "race_rate": races / len(counted) if counted else None, "ci_low": low, "ci_high": high,
            "not_counted": rates.counts(r["verdict"] for r in group if r["verdict"] in rates.NOT_COUNTED),
            "outcomes": ", ".join(f"{o} {n}" for o, n in counts.items() if n),
            "wait_s": _median([r["nonsaver_wait_s"] for r in counted if r["nonsaver_wait_s"] != ""]),
            "read_s": _median([r["nonsaver_read_vs_save_end_s"] for r in counted
                               if r["nonsaver_read_vs_save_end_s"] != ""]),
        })
    return out


def markdown(groups) -> str:
    lines = ["| scenario | variant | world size | skew (s) | runs | race rate (95% CI) | not counted | "
             "outcomes (counted runs, all ranks) | median sync wait (s) | median read vs save end (s) |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |"]
    for g in groups:
        rate = "-" if not g["counted"] else rates.share(g["races"], g["counted"])
        lines.append(f"| {g['scenario']} | {g['variant']} | {g['world_size']} | {g['skew_s']:g} | {g['runs']} | "
                     f"{rate} | {g['not_counted'] or '-'} | {g['outcomes'] or '-'} | "
                     f"{g['wait_s'] if g['wait_s'] != '' else '-'} | {g['read_s'] if g['read_s'] != '' else '-'} |")
    return "\n".join(lines)


def race_vs_skew_figure(groups):
    """Race rate against skew, a line per (scenario, variant, world size) swept over skews, each point
    with its 95% interval as an error bar and its count beside it; None when no line has two skews."""
    lines = {}
    for g in groups:
        if g["counted"]:
            lines.setdefault((g["scenario"], g["variant"], g["world_size"]), []).append(g)
    lines = {k: v for k, v in lines.items() if len(v) > 1}
    if not lines:
        return None
    from matplotlib.figure import Figure  # no pyplot: no global state, so a thread may draw
    from matplotlib.ticker import PercentFormatter

    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    skews = [g["skew_s"] for points in lines.values() for g in points]
    nudge = 0.012 * (max(skews) - min(skews))  # lines side by side at each skew, so their bars do not overlap
    for i, ((scenario, variant, ws), points) in enumerate(sorted(lines.items())):
        points = sorted(points, key=lambda g: g["skew_s"])
        xs = [g["skew_s"] + (i - (len(lines) - 1) / 2) * nudge for g in points]
        ys = [g["race_rate"] for g in points]
        bars = [[g["race_rate"] - g["ci_low"] for g in points], [g["ci_high"] - g["race_rate"] for g in points]]
        drawn = ax.errorbar(xs, ys, yerr=bars, marker="o", capsize=3, label=f"{scenario}, {variant} (world size {ws})")
        for x, g in zip(xs, points):
            ax.annotate(f"{g['races']}/{g['counted']}", (x, g["race_rate"]), textcoords="offset points",
                        xytext=(5, 4), fontsize=7, color=drawn.lines[0].get_color())
    ax.set(xlabel="skew: the saving rank's delay before the last save (s)",
           ylabel="race rate (bars: 95% Wilson interval)", ylim=(-0.05, 1.05),
           title="How often ranks failed to load the last checkpoint (races/runs)")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_race_vs_skew(groups, path: Path) -> bool:
    """race_vs_skew.png (see race_vs_skew_figure); False: no line was swept over skews."""
    fig = race_vs_skew_figure(groups)
    if fig is None:
        path.unlink(missing_ok=True)
        return False
    save_png_atomic(fig, path)
    return True


PHASES = [  # (label, start event, end events, colour), drawn in this order
    ("start-up", "rank_start", ("fit_start",), "#d9d9d9"),
    ("training", "fit_start", ("train_end", "crash"), "#9ecae1"),
    ("saving", "save_start", ("save_end", "save_error"), "#3182bd"),
    ("stall (skew)", "skew_start", ("skew_end",), "#969696"),
    ("sync wait", "sync_enter", ("sync_exit", "sync_error"), "#fd8d3c"),
    ("read delay", "read_delay_start", ("read_delay_end",), "#fdd0a2"),
    ("loading", "load_attempt", ("load_done", "load_error", "resume"), "#31a354"),
]
FAILURES = ("load_error", "sync_error", "save_error", "crash", "rotate_error", "train_error")


def timeline_figure(run: Path, events: list):
    """One bar per rank: start-up, training, skew, saving, waiting at its sync, loading; failures
    marked and each rank's outcome on the right. After restarts (launch.max_restarts) each attempt's phases
    are drawn on, and a dotted line marks where each restart began. Time runs from the first rank's start: the
    launcher's own start-up before it is only given, in the x label. The title holds the run's
    whole explanation, wrapped, and the figure grows to fit it."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from train import figures

    summary = load_summary(run)
    launched = next((e["t"] for e in events if e["event"] == "launch_start"), events[0]["t"])
    t0 = next((e["t"] for e in events if e["event"] == "rank_start"), launched)
    end = max(e["t"] for e in events) - t0
    ranks = sorted({e["rank"] for e in events if isinstance(e["rank"], int)})
    attempts = sorted({e.get("attempt", 0) for e in events if isinstance(e["rank"], int)})
    restarts = [(n, min(e["t"] for e in events if e["event"] == "rank_start" and e.get("attempt", 0) == n))
                for n in attempts if n > 0 and any(e["event"] == "rank_start" and e.get("attempt", 0) == n
                                                   for e in events)]
    fig = figures.figure(10, 1)  # its height is set below, once the title is wrapped
    ax = fig.subplots()
    for y, rank in enumerate(ranks):
        mine = [e for e in events if e["rank"] == rank]
        for _, start, stops, colour in PHASES:
            for i, e in enumerate(mine):
                if e["event"] != start:
                    continue
                # a phase ends within its attempt (launch.max_restarts): a rank killed mid-phase ends it there
                same = [f for f in mine[i + 1:] if f.get("attempt", 0) == e.get("attempt", 0)]
                stop = next((f for f in same if f["event"] in stops), None)
                width = (stop["t"] if stop else (same[-1]["t"] if same and restarts else t0 + end)) - e["t"]
                ax.barh(y, max(width, end * 0.006), left=e["t"] - t0, color=colour, height=0.6,
                        edgecolor="black" if stop and stop["event"] in FAILURES else "none")
        for e in mine:
            if e["event"] in FAILURES:
                ax.plot(e["t"] - t0, y, marker="X", color="#d62728", markersize=11, zorder=5)
    for n, began in restarts:  # where each restart began: its first rank's start
        ax.axvline(began - t0, color="#636363", linestyle=":", linewidth=1.5)
        ax.text(began - t0, -0.55, f" attempt {n}", fontsize=8, va="bottom", color="#636363")
    written = saves(events)
    if written:
        ax.axvline(written[-1]["t"] - t0, color="#3182bd", linestyle="--", linewidth=1)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlim(0, end * 1.02)
    # each rank's outcome, as tick labels on the right so the layout makes room for them
    outcomes = [summary["ranks"][r]["outcome"] if r < len(summary["ranks"]) else "?" for r in ranks]
    right = ax.secondary_yaxis("right")
    right.set_yticks(range(len(ranks)), outcomes)
    right.tick_params(length=0)
    for text, outcome in zip(right.get_yticklabels(), outcomes):
        text.set_color("#2ca02c" if outcome == "loaded" else "#d62728")
    since = "launch" if t0 == launched else \
        f"the first rank started (the launcher took {t0 - launched:.1f} s before it)"
    ax.set_xlabel(f"seconds since {since}" + ("; dashed: the last save ended" if written else "") +
                  ("; dotted: a restart began (torch elastic)" if restarts else ""))
    cfg = summary["config"]
    head = (f"{cfg.get('scenario') or 'seed'} x {cfg['callback']['name']}, skew {cfg['skew']['seconds']:g} s "
            f"on rank {cfg['skew']['rank']}: {summary['verdict']}")
    title = fig.suptitle(figures.wrap(fig, f"{head}\n{summary['explanation']}", fontsize=9), fontsize=9)
    handles = [Patch(color=c, label=label) for label, _, _, c in PHASES]
    handles.append(Line2D([], [], marker="X", color="#d62728", linestyle="none", label="failure"))
    key = figures.legend(fig, handles, fontsize=8)
    figures.grow_to_fit(fig, 0.9 + 0.5 * len(ranks), title, key)  # the bars and the x axis, then title and legend
    return fig


def plot_timeline(run: Path, events: list, path: Path):
    save_png_atomic(timeline_figure(run, events), path)


def draw_timeline(run: Path, events: list = None) -> bool:
    """timeline.png in a run dir that has a verdict to show (a job that crashed or was n/a has none);
    True when drawn."""
    summary = read_summary(run)
    if summary is None or summary.get("verdict") == "n/a":
        return False
    plot_timeline(run, read_events(run) if events is None else events, run / "timeline.png")
    return True


def write_report(root, drawn=frozenset()) -> str:
    """Write report.csv, report.md, race_vs_skew.png into root and timeline.png into each run,
    except the runs in drawn (a sweep draws each job's timeline while the next job runs)."""
    root = Path(root)
    runs = find_runs(root)
    if not runs:
        raise SystemExit(f"error: no runs under {root} (a run dir has a .hydra/ folder)")
    skipped = []  # what could not be read, each with its reason: said in one line at the end
    events = {run: read_events(run, skipped) for run in runs}
    rows = []
    for run in list(runs):
        try:
            rows.append(run_row(root, run, events[run]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError) as e:
            skipped.append(f"{run.relative_to(root) or run.name}: left out of the report ({unreadable(e)})")
            runs.remove(run)
    if not rows:
        raise SystemExit(f"error: no readable runs under {root}: " + "; ".join(skipped))
    with open(root / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    groups = aggregate(rows)
    table = markdown(groups)
    (root / "report.md").write_text(f"# Report: {root.name}\n\n{len(rows)} runs.\n\n{table}\n\n"
                                    "race rate: how many runs had some rank not load the last checkpoint, "
                                    "out of the runs that gave a verdict, with its 95% Wilson interval "
                                    "(`5/5 (57–100%)`). Not counted: runs that were interrupted, whose harness "
                                    "failed or that crashed; they say nothing about the race. Read vs save end: "
                                    "when the non-saving ranks started reading, relative to the end of the last "
                                    "save (negative: too early).\n", encoding="utf-8")
    if plot_race_vs_skew(groups, root / "race_vs_skew.png"):
        (root / "report.md").write_text((root / "report.md").read_text(encoding="utf-8") +
                                        "\n![race rate against skew](race_vs_skew.png)\n", encoding="utf-8")
    drawn = {Path(run).resolve() for run in drawn}
    for run in runs:
        if run.resolve() not in drawn:
            try:
                draw_timeline(run, events[run])
            except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
                skipped.append(f"{run.relative_to(root)}: no timeline ({unreadable(e)})")
    out = f"{table}\n\nreport: {root / 'report.md'}"
    if skipped:
        out += f"\nskipped {len(skipped)}: " + "; ".join(skipped[:5]) + ("; ..." if len(skipped) > 5 else "")
    if len({(r["scenario"], r["variant"]) for r in rows}) > 1:
        out += f"\n\n{write_matrix(root, rows, CONFIGS)}\n\nmatrix: {root / 'matrix.md'}, {root / 'matrix.png'}, {root / 'matrix.html'}"
    return out


def skew_cell(skew: dict) -> str:
    where = f" + rank 0: {skew['mid_write_s']} s mid-write" if skew.get("mid_write_s") else ""
    return f"rank {skew['rank']}: {skew['seconds']} s{where}"


def rank_cell(rank: dict) -> str:
    lead = rank["timings"].get("load_after_save_end")
    return rank["outcome"] + (f" ({lead:+.2f} s)" if lead is not None else "")


def compare(run_dirs) -> str:
    """One column per run: variant, verdict, then each rank's outcome and load time vs the save's end."""
    summaries = [load_summary(d) for d in run_dirs]
    header = ["", *(s["config"]["callback"]["name"] for s in summaries)]
    rows = [header,
            ["skew", *(skew_cell(s["config"]["skew"]) for s in summaries)],
            ["verdict", *(s["verdict"] for s in summaries)]]
    for rank in range(max(len(s["ranks"]) for s in summaries)):
        rows.append([f"rank {rank}", *(rank_cell(s["ranks"][rank]) if rank < len(s["ranks"]) else "-"
                                       for s in summaries)])
    lines = [align(rows), "(rank: outcome (when its load started, relative to the end of the last save))"]
    for s in summaries:
        lines.append(f"{s['config']['callback']['name']}: {s['explanation']}")
    return "\n".join(lines)


def merge_main(dirs, out):
    from train.config import ConfigError
    from train.nodes import merge, print_merged, read_node

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
    args = parser.parse_args(argv)
    if args.merge:
        return merge_main(args.merge, args.out)
    if args.compare:
        print(compare(args.compare))
    elif args.dir:
        if not Path(args.dir).is_dir():
            parser.error(f"{args.dir}: not a directory")
        print(write_report(args.dir))
    else:
        parser.error("give a run or sweep dir, or --compare RUN_DIR ...")


if __name__ == "__main__":
    sys.exit(main())
