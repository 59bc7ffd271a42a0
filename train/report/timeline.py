"""timeline.png: each rank's phases and failures over the run's time."""
from pathlib import Path

from train.events import read_events
from train.judge.vocabulary import file_name, saves
from train.report.files import save_png_atomic
from train.report.run_records import fix_name, load_summary, read_summary

PHASES = [  # (label, start event, end events, colour), drawn in this order
    ("start-up", "rank_start", ("fit_start",), "#d9d9d9"),
    ("training", "fit_start", ("train_end", "crash"), "#9ecae1"),
    ("saving", "save_start", ("save_end", "save_error"), "#3182bd"),
    ("async save in flight", "save_dispatch", ("save_end",), "#c6dbef"),  # dispatched until the loop saw it durable
    ("stall (skew)", "skew_start", ("skew_end",), "#969696"),
    ("sync wait", "sync_enter", ("sync_exit", "sync_error"), "#fd8d3c"),
    ("read delay", "read_delay_start", ("read_delay_end",), "#fdd0a2"),
    ("loading", "load_attempt", ("load_done", "load_error", "resume"), "#31a354"),
]
FAILURES = ("load_error", "sync_error", "save_error", "crash", "rotate_error", "train_error")
YOURS = {"r": ("read", "v", "#006d2c"), "w": ("wrote", "^", "#08519c")}  # your code's opens (file_op with `by`)


def opened_by_you(events: list) -> list:
    """The checkpoint files your code (fix=own's package) opened, as train/rank/observe.py saw them."""
    return [e for e in events if e["event"] == "file_op" and e.get("op") == "open" and e.get("by")]


def timeline_figure(run: Path, events: list):
    """One bar per rank: start-up, training, skew, saving, waiting at its sync, loading; failures
    marked, each open of a checkpoint file by your code (fix=own) above its rank's bar with the file's name, and
    each rank's outcome on the right. After restarts (launch.max_restarts) each attempt's phases
    are drawn on, and a dotted line marks where each restart began. Time runs from the first rank's start: the
    launcher's own start-up before it is only given, in the x label. The title holds the run's
    whole explanation, wrapped, and the figure grows to fit it."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from train.report import figures

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
        named = set()
        for e in opened_by_you(mine):  # above the bar; each file named where your code first opened it
            _, marker, colour = YOURS[e.get("mode", "r")]
            ax.plot(e["t"] - t0, y - 0.4, marker=marker, color=colour, markersize=7, linestyle="none", zorder=6)
            if (e.get("mode"), e["path"]) not in named:
                named.add((e.get("mode"), e["path"]))
                ax.text(e["t"] - t0, y - 0.4, f" {file_name(e['path'])}", fontsize=7, va="center", color=colour,
                        clip_on=True)
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
    head = (f"{cfg.get('scenario') or 'seed'} x {fix_name(cfg)}, skew {cfg['skew']['seconds']:g} s "
            f"on rank {cfg['skew']['rank']}: {summary['verdict']}")
    title = fig.suptitle(figures.wrap(fig, f"{head}\n{summary['explanation']}", fontsize=9), fontsize=9)
    handles = [Patch(color=c, label=label) for label, _, _, c in PHASES]
    handles.append(Line2D([], [], marker="X", color="#d62728", linestyle="none", label="failure"))
    modes = {e.get("mode", "r") for e in opened_by_you(events)}
    handles += [Line2D([], [], marker=marker, color=colour, linestyle="none", label=f"your code {verb} this file")
                for mode, (verb, marker, colour) in YOURS.items() if mode in modes]
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
