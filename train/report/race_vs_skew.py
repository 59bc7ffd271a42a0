"""race_vs_skew.png: the race rate with its interval against the skew, one line per fix."""
from pathlib import Path

from train.report.files import save_png_atomic


def race_vs_skew_figure(groups):
    """Race rate against skew, a line per (scenario, fix, world size) swept over skews, each point
    with its 95% interval as an error bar and its count beside it; None when no line has two skews."""
    lines = {}
    for g in groups:
        if g["counted"]:
            lines.setdefault((g["scenario"], g["fix"], g["world_size"]), []).append(g)
    lines = {k: v for k, v in lines.items() if len(v) > 1}
    if not lines:
        return None
    from matplotlib.figure import (
        Figure,  # no pyplot: no global state, so a thread may draw
    )
    from matplotlib.ticker import PercentFormatter

    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    skews = [g["skew_s"] for points in lines.values() for g in points]
    nudge = 0.012 * (max(skews) - min(skews))  # lines side by side at each skew, so their bars do not overlap
    for i, ((scenario, fix, ws), points) in enumerate(sorted(lines.items())):
        points = sorted(points, key=lambda g: g["skew_s"])
        xs = [g["skew_s"] + (i - (len(lines) - 1) / 2) * nudge for g in points]
        ys = [g["race_rate"] for g in points]
        bars = [[g["race_rate"] - g["ci_low"] for g in points], [g["ci_high"] - g["race_rate"] for g in points]]
        drawn = ax.errorbar(xs, ys, yerr=bars, marker="o", capsize=3, label=f"{scenario}, {fix} (world size {ws})")
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
