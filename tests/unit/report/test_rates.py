"""Counts and 95% Wilson intervals in the report and the matrix, from hand-made report rows (pure)."""
import math

import pytest

from train.report.matrix import cell, label, md_label
from train.judge.vocabulary import OUTCOMES
from train.report.rates import interval, share
from train.report.runs import aggregate, markdown
from train.report.race_vs_skew import race_vs_skew_figure


def row(verdict, scenario="seed", fix="unsynced", skew=1.0, replicas="", **outcomes) -> dict:
    """One run as report.run_row gives it."""
    return {"scenario": scenario, "fix": fix, "world_size": 2, "skew_s": skew, "verdict": verdict,
            "replicas": replicas, "note": "", "nonsaver_wait_s": "", "nonsaver_read_vs_save_end_s": "",
            **{f"n_{o}": outcomes.get(o, 0) for o in OUTCOMES}}


def race(**kw):
    return row("race", replicas="diverged", loaded=1, missing=1, **kw)


def clean(**kw):
    return row("clean", replicas="agree", loaded=2, **kw)


def wilson(k, n, z=1.959963984540054):
    """The Wilson score interval by its formula."""
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return mid - half, mid + half


@pytest.mark.parametrize("k, n", [(0, 1), (1, 1), (5, 5), (0, 5), (1, 5), (3, 5), (17, 40)])
def test_the_interval_is_wilsons(k, n):
    assert interval(k, n) == pytest.approx(wilson(k, n), abs=1e-9)


def test_a_rate_reads_as_its_count_and_interval():
    assert share(5, 5) == "5/5 (57–100%)"
    assert share(1, 1) == "1/1 (21–100%)"
    assert share(0, 1) == "0/1 (0–79%)"
    assert share(0, 5) == "0/5 (0–43%)"
    assert share(1, 5) == "1/5 (4–62%)"


def test_one_run_never_reads_100_percent():
    c = cell([race()])
    assert (c["runs"], c["counted"], c["races"], c["race_rate"]) == (1, 1, 1, 1.0)
    assert (c["ci_low"], c["ci_high"]) == (0.207, 1.0)
    assert label(c) == "race 1/1 (21–100%)\nmissing\nreplicas diverged"
    assert md_label(c) == "**race 1/1 (21–100%)** (missing; replicas diverged)"


def test_interrupted_and_failed_runs_are_counted_apart_not_in_the_rate():
    # 1 race and 4 interrupted: the rate is 1 of 1, not 20%, and the cell is not "interrupted"
    c = cell([race(), *[row("interrupted", aborted=2) for _ in range(4)]])
    assert (c["runs"], c["counted"], c["races"], c["race_rate"]) == (5, 1, 1, 1.0)
    assert (c["not_counted"], c["not_counted_verdicts"]) == (4, "interrupted 4")
    assert (c["verdict"], c["verdict_runs"], c["outcome"]) == ("race", 1, "missing")
    assert label(c) == "race 1/1 (21–100%)\nmissing\nreplicas diverged\nnot counted: interrupted 4"

    # a harness error and a job that crashed before its verdict are not counted either
    c = cell([clean(), clean(), race(), row("error", error=2), row("crashed"), row("interrupted")])
    assert (c["runs"], c["counted"], c["races"], c["race_rate"]) == (6, 3, 1, 0.333)
    assert (c["ci_low"], c["ci_high"]) == tuple(round(x, 3) for x in wilson(1, 3))
    assert (c["not_counted"], c["not_counted_verdicts"]) == (3, "error 1, crashed 1, interrupted 1")
    assert label(c).split("\n") == ["clean 2/3 (21–94%)", "race 1/3 (6–79%)", "missing",
                                    "not counted: error 1, crashed 1, interrupted 1"]


def test_a_cell_where_no_run_counted_gives_no_rate():
    c = cell([row("interrupted", aborted=2), row("interrupted", aborted=2), row("error", error=2)])
    assert (c["runs"], c["counted"], c["races"], c["race_rate"], c["ci_low"], c["ci_high"]) == (3, 0, 0, "", "", "")
    assert (c["verdict"], c["verdict_runs"], c["not_counted"]) == ("interrupted", 2, 3)
    assert label(c) == "no verdict\ninterrupted 2, error 1\naborted, error"
    assert "%" not in label(c)


def test_a_tie_shows_the_worse_verdict():
    assert cell([clean(), race()])["verdict"] == cell([race(), clean()])["verdict"] == "race"


def test_the_report_counts_the_same_way():
    rows = [race(skew=1.0), *[row("interrupted", skew=1.0, aborted=2) for _ in range(4)],
            *[clean(fix="barrier", skew=s) for s in (0.0, 0.0, 1.0)], row("crashed", fix="barrier", skew=0.0)]
    groups = {(g["fix"], g["skew_s"]): g for g in aggregate(rows)}
    g = groups[("unsynced", 1.0)]
    assert (g["runs"], g["counted"], g["races"], g["race_rate"], g["not_counted"]) == (5, 1, 1, 1.0, "interrupted 4")
    assert g["outcomes"] == "loaded 1, missing 1"  # the interrupted runs' aborted ranks are not in it
    table = markdown(aggregate(rows))
    assert "| seed | unsynced | 2 | 1 | 5 | 1/1 (21–100%) | interrupted 4 | loaded 1, missing 1 |" in table
    assert "| seed | barrier | 2 | 0 | 3 | 0/2 (0–66%) | crashed 1 | loaded 4 |" in table
    assert "| seed | barrier | 2 | 1 | 1 | 0/1 (0–79%) | - | loaded 2 |" in table
    assert " 100% |" not in table and " 20% |" not in table


def test_race_vs_skew_draws_each_interval_as_an_error_bar_with_its_count():
    rows = [race(skew=0.0), clean(skew=0.0), race(skew=2.0), race(skew=2.0), row("interrupted", skew=2.0),
            clean(fix="barrier", skew=0.0), clean(fix="barrier", skew=2.0)]
    fig = race_vs_skew_figure(aggregate(rows))
    ax = fig.axes[0]
    bars = {}
    for container, line in zip(ax.containers, ("barrier", "unsynced")):
        for (x, low), (_, high) in container.lines[2][0].get_segments():
            bars[(line, round(x))] = (low, high)
    assert bars[("unsynced", 0)] == pytest.approx(wilson(1, 2))
    assert bars[("unsynced", 2)] == pytest.approx(wilson(2, 2))  # the interrupted run is not counted
    assert bars[("barrier", 2)] == pytest.approx((0, wilson(0, 1)[1]), abs=1e-12)
    assert sorted(t.get_text() for t in ax.texts) == ["0/1", "0/1", "1/2", "2/2"]
    assert "95% Wilson interval" in ax.get_ylabel()
