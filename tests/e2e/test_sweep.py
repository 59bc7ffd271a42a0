"""Hydra multirun sweeps and the report made of them, on real runs."""
import csv
import json
import re
import shutil
import subprocess
import sys

import pytest
from PIL import Image

from conftest import ROOT, Run, console_noise, multirun_command, together, train_command

ENDS_WITHIN_S = 400  # every sweep and run together; each takes well under a minute on 2 idle cores


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> dict:
    """The real sweeps (and the one run) these tests read, started together and waited for: name -> a
    CompletedProcess (stdout and stderr apart, as conftest's multirun gives them); each sweep in root/<name>."""
    root = tmp_path_factory.mktemp("sweeps")
    commands = {
        "small": ["skew.seconds=0,3", "fix=unsynced,barrier", "world_size=2", "epochs=1", "launch.job_lines=true"],
        "bad_job": ["skew.rank=5,0", "world_size=2", "epochs=1", "skew.seconds=2"],
        "echo": ["launch.echo_ranks=true", "world_size=2", "epochs=1", "skew.seconds=0", "fix=barrier"],
    }
    started = {name: (multirun_command(root / name, *argv), root / name, None) for name, argv in commands.items()}
    started["run"] = (train_command(root / "run", "world_size=2", "skew.seconds=1", "epochs=1"), root / "run", None)
    return {**together(root, started, ENDS_WITHIN_S), "root": root}


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def assert_png(path, min_bytes=10_000):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > min_bytes
    with Image.open(path) as im:
        im.verify()
        assert im.size[0] > 400 and im.size[1] > 150


@pytest.mark.slow  # the real sweep (the `real` fixture)
def test_a_small_sweep_makes_the_report(real):
    sweep, proc = real["root"] / "small", real["small"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    for k in range(1, 5):
        assert f"[sweep] job {k} of 4: " in proc.stdout
    # one line per job (point, verdict, seconds), not every rank's output; that stays in the run dir
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[sweep] job ")]
    assert len(lines) == 4 and all(re.search(r"  (race|clean)  \d+\.\d s$", line) for line in lines), lines
    assert "fix=unsynced" in next(line for line in lines if "  race  " in line)
    assert "Attempting to load model." not in proc.stdout and "[rank " not in proc.stdout
    assert "\r" not in proc.stdout, "no progress bar outside a terminal"
    for job in sweep.glob("[0-9]-*"):
        rank_logs = "".join(p.read_text() for p in job.glob("logs/*/attempt_0/*/stdout.log"))
        assert rank_logs.count("Attempting to load model.") == 2
        assert "summary: " in (job / "console.log").read_text()

    rows = read_csv(sweep / "report.csv")
    assert len(rows) == 4
    verdict = {(r["fix"], float(r["skew_s"])): r["verdict"] for r in rows}
    assert verdict[("unsynced", 3.0)] == "race"
    assert verdict[("barrier", 0.0)] == verdict[("barrier", 3.0)] == "clean"
    late = next(r for r in rows if r["fix"] == "unsynced" and float(r["skew_s"]) == 3.0)
    assert late["n_missing"] == "1" and float(late["nonsaver_read_vs_save_end_s"]) < -1.0
    waited = next(r for r in rows if r["fix"] == "barrier" and float(r["skew_s"]) == 3.0)
    assert float(waited["nonsaver_wait_s"]) > 1.5
    assert all(float(r["wall_s"]) > 0 for r in rows)

    md = (sweep / "report.md").read_text()
    assert "| fix | world size | skew (s) | runs | race rate (95% CI) | not counted |" in md
    assert "| barrier | 2 | 3 | 1 | 0/1 (0–79%) | - | loaded 2 |" in md
    assert "| unsynced | 2 | 3 | 1 | 1/1 (21–100%) | - | loaded 1, missing 1 |" in md  # one run: not "100%"
    assert "| unsynced | 2 | 3 | 1 | 1/1 (21–100%) |" in proc.stdout  # printed at the end of the sweep
    assert_png(sweep / "race_vs_skew.png")
    timelines = sorted(sweep.glob("*/timeline.png"))
    assert len(timelines) == 4
    for png in timelines:
        assert_png(png)

    # the report reads only files: the same dir gives the same CSV again
    first = (sweep / "report.csv").read_bytes()
    again = subprocess.run([sys.executable, "-m", "train.report", str(sweep)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert (sweep / "report.csv").read_bytes() == first

    # a job that died before recording a verdict is reported as crashed, not dropped
    job = next(sweep.glob("0-*"))
    shutil.copytree(job / ".hydra", sweep / "9-crashed" / ".hydra")
    subprocess.run([sys.executable, "-m", "train.report", str(sweep)], cwd=ROOT, check=True,
                   capture_output=True, timeout=120)
    rows = read_csv(sweep / "report.csv")
    assert len(rows) == 5 and rows[-1]["job"] == "9-crashed" and rows[-1]["verdict"] == "crashed"
    # and counted apart, not in a race rate (job 0: unsynced at skew 0, which races or not)
    assert re.search(r"\| unsynced \| 2 \| 0 \| 2 \| (0/1 \(0–79%\)|1/1 \(21–100%\)) \| crashed 1 \|",
                     (sweep / "report.md").read_text())


@pytest.mark.slow  # the real sweep (the `real` fixture)
def test_a_sweep_and_a_run_show_no_stack_trace_traceback_or_torch_warning(real):
    """The small sweep (one line a job), the sweep that echoes its ranks, and a clean run."""
    for name in ("small", "echo", "run"):
        assert real[name].returncode == 0, real[name].stderr[-3000:]
        assert not console_noise(real[name].stdout, real[name].stderr), name


@pytest.mark.slow  # the real sweep (the `real` fixture)
def test_a_bad_job_is_reported_and_the_sweep_goes_on(real):
    sweep, proc = real["root"] / "bad_job", real["bad_job"]
    assert proc.returncode == 1
    assert "error: skew.rank=5: must be a rank in 0..1 (world_size=2)" in proc.stderr
    assert "[sweep] 1 of 2 jobs did not give a result" in proc.stderr
    # no terminal, no launch.job_lines: the progress, a line a tenth of the jobs (here each but the last), no line a job
    assert "[sweep] 1 of 2 jobs (50%): 0 held, 0 raced, 1 no verdict; ~" in proc.stdout, proc.stdout
    assert "[sweep] job " not in proc.stdout
    rows = read_csv(sweep / "report.csv")  # the good job ran and was reported
    assert [(r["skew_rank"], r["verdict"]) for r in rows] == [("0", "race")]
    assert not any(sweep.glob("0-*")), "the bad job leaves no half-made run dir"


@pytest.mark.slow  # the real sweep (the `real` fixture)
def test_echo_ranks_brings_each_ranks_output_back(real):
    proc = real["echo"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("Attempting to load model.") == 2  # both ranks' output, as a single run prints it
    assert "rank  outcome" in proc.stdout
    assert re.search(r"\[sweep\] job 1 of 1: .*  clean  \d+\.\d s", proc.stdout)


def test_the_sweeps_end_draws_the_queued_timelines_itself_and_waits_only_for_the_one_in_flight(tmp_path, monkeypatch):
    """The drawing thread runs at a low priority; on a loaded machine the timelines still queued there at the
    sweep's end took minutes. The end cancels them (write_report draws them at full priority) and waits for the
    one being drawn."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import train.report.runs
    from train.launch.sweep import SweepProgress

    sweep = SweepProgress()
    sweep.total, sweep.sweep_dir, sweep.failed = 3, tmp_path, []
    sweep.over, sweep.drawing = threading.Event(), ThreadPoolExecutor(1)
    ran, in_flight = [], threading.Event()

    def draw(run):
        in_flight.set()
        sweep.over.wait(60)  # busy until the end is under way
        ran.append(run)
        return True

    sweep.timelines = {tmp_path / "job0": sweep.drawing.submit(draw, tmp_path / "job0")}
    assert in_flight.wait(60)
    sweep.timelines.update({tmp_path / f"job{k}": sweep.drawing.submit(draw, tmp_path / f"job{k}") for k in (1, 2)})
    told = {}
    monkeypatch.setattr(train.report.runs, "write_report", lambda root, drawn: told.update(drawn=drawn) or "report")
    sweep.finish()
    assert ran == [tmp_path / "job0"]  # the queued two never ran on the thread
    assert told["drawn"] == {tmp_path / "job0"}  # so write_report draws them


def inside(fig, artist) -> bool:
    """artist is drawn wholly within the figure: nothing of it is clipped at an edge."""
    box = artist.get_window_extent(fig.canvas.get_renderer())
    return fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1


def words(text) -> str:
    return " ".join(text.split())


def matrix_cells(n_scenarios, n_fixes) -> list:
    """Hand-made cells: the known scenarios and fixes first, then made-up ones for wider grids."""
    from train.report.matrix import FIX_ORDER, SCENARIO_ORDER

    scenarios = (SCENARIO_ORDER + [f"scenario_{k}" for k in range(20)])[:n_scenarios]
    fixes = (FIX_ORDER + [f"fix_{k}" for k in range(20)])[:n_fixes]
    na = {"runs": 0, "counted": 0, "races": 0, "race_rate": "", "ci_low": "", "ci_high": "", "not_counted": 0,
          "not_counted_verdicts": "", "verdict": "n/a", "verdict_runs": 0, "outcome": "", "replicas_diverged": "",
          "note": "does not apply"}
    kinds = [  # the longest labels: a race with every line, another verdict with races, no verdict at all
        {**na, "runs": 5, "counted": 4, "races": 4, "race_rate": 1.0, "ci_low": 0.51, "ci_high": 1.0,
         "not_counted": 1, "not_counted_verdicts": "interrupted 1", "verdict": "race", "verdict_runs": 4,
         "outcome": "timeout, skipped", "replicas_diverged": 4, "note": ""},
        {**na, "runs": 5, "counted": 5, "race_rate": 0.0, "ci_low": 0.0, "ci_high": 0.434, "verdict": "clean",
         "verdict_runs": 5, "outcome": "loaded", "replicas_diverged": 0, "note": ""},
        {**na, "runs": 5, "counted": 5, "races": 2, "race_rate": 0.4, "ci_low": 0.118, "ci_high": 0.769,
         "verdict": "save_failed", "verdict_runs": 3, "outcome": "skipped, corrupt", "replicas_diverged": 0,
         "note": ""},
        {**na, "runs": 5, "not_counted": 5, "not_counted_verdicts": "interrupted 3, error 2", "verdict": "interrupted",
         "verdict_runs": 3, "outcome": "aborted, error", "replicas_diverged": 0, "note": ""},
        na]
    cells = []
    for i, s in enumerate(scenarios):
        for j, f in enumerate(fixes):
            cells.append({"scenario": s, "fix": f, **kinds[(i + j) % len(kinds)]})
    return cells


@pytest.mark.parametrize("grid", [(1, 1), (2, 2), (2, 1), (1, 8), (8, 1), (8, 8), (10, 12)])
def test_the_matrix_title_and_legend_fit_any_grid(tmp_path, grid):
    from train.report.matrix import matrix_figure, plot
    from train.report.matrix import title as matrix_title

    cells = matrix_cells(*grid)
    fig = matrix_figure(cells)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    title, key, ax = fig._suptitle, fig.legends[0], fig.axes[0]
    assert words(title.get_text()) == matrix_title(cells)  # wrapped over lines, never cut
    assert "in fastai:" in matrix_title(cells)  # the framework is named
    assert inside(fig, title) and inside(fig, key)
    assert all(inside(fig, t) for t in ax.get_xticklabels() + ax.get_yticklabels())
    grid_box = ax.get_tightbbox(renderer)  # the cells with the scenario and fix names
    assert not title.get_window_extent(renderer).overlaps(grid_box)
    assert not key.get_window_extent(renderer).overlaps(grid_box)
    assert {t.get_text() for t in key.get_texts()} == {c["verdict"] for c in cells}
    # each cell's text (its count and interval among it) lies within its cell
    for patch, text in zip(ax.patches, ax.texts):
        cell_box, text_box = patch.get_window_extent(renderer), text.get_window_extent(renderer)
        assert cell_box.x0 < text_box.x0 and text_box.x1 < cell_box.x1, text.get_text()
        assert cell_box.y0 < text_box.y0 and text_box.y1 < cell_box.y1, text.get_text()
    plot(cells, tmp_path / "matrix.png")  # the PNG is this figure, at 110 dpi
    with Image.open(tmp_path / "matrix.png") as im:
        assert im.format == "PNG"
        assert im.size == pytest.approx((fig.get_figwidth() * 110, fig.get_figheight() * 110), abs=1)


def made_run(run, explanation, n_ranks=8, launcher_took=5.0) -> list:
    """A run dir by hand: summary.json and its events, rank 0 saving late and the others loading early."""
    import json as json_

    from train.events import events_dir

    t = 1000.0 + launcher_took
    events = [{"t": 1000.0, "rank": "launcher", "event": "launch_start"}]
    for r in range(n_ranks):
        start = t + 0.05 * r
        events += [{"t": start, "rank": r, "event": "rank_start"}, {"t": start + 0.3, "rank": r, "event": "fit_start"},
                   {"t": start + 0.6, "rank": r, "event": "train_end"}]
        if r == 0:
            events += [{"t": start + 0.6, "rank": 0, "event": "skew_start"},
                       {"t": start + 1.6, "rank": 0, "event": "skew_end"},
                       {"t": start + 1.6, "rank": 0, "event": "save_start"},
                       {"t": start + 1.7, "rank": 0, "event": "save_end"}]
        events += [{"t": start + 1.7 if r == 0 else start + 0.61, "rank": r, "event": "load_attempt"},
                   {"t": start + 1.75 if r == 0 else start + 0.62, "rank": r,
                    "event": "load_done" if r == 0 else "load_error"}]
    events.append({"t": t + 2.0, "rank": "launcher", "event": "launch_end"})
    events_dir(run).mkdir(parents=True)
    (events_dir(run) / "all.jsonl").write_text("".join(json_.dumps(e) + "\n" for e in events))
    summary = {"verdict": "race", "explanation": explanation,
               "ranks": [{"rank": r, "outcome": "loaded" if r == 0 else "missing"} for r in range(n_ranks)],
               "config": {"scenario": "seed", "fix": {"name": "unsynced"}, "skew": {"seconds": 1, "rank": 0}}}
    (run / "summary.json").write_text(json_.dumps(summary))
    return sorted(events, key=lambda e: e["t"])


def assert_timeline_fits(fig, explanation):
    """The whole explanation is in the title, and the title, legend, labels and outcomes lie within the figure."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    title, key, ax = fig._suptitle, fig.legends[0], fig.axes[0]
    assert "".join(explanation.split()) in "".join(title.get_text().split())
    assert "[...]" not in title.get_text()
    outcomes = ax.child_axes[0].get_yticklabels()  # the secondary y axis on the right
    for artist in [title, key, ax.xaxis.label, *ax.get_yticklabels(), *outcomes]:
        assert inside(fig, artist), artist
    assert not title.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))


def test_a_timeline_starts_at_the_first_rank_and_shows_the_whole_explanation(tmp_path):
    from train.report.timeline import timeline_figure

    long = ("race: ranks 1, 2, 3, 4, 5, 6 and 7 tried to load 0.9-1.1 s before rank 0 finished saving "
            "(FileNotFoundError); the replicas diverged: rank 0 vs ranks 1-7 end with different weights; "
            "rank 0's save of /tmp/a/very/long/path/that/has/no/spaces/in/it/models/best.pth failed "
            "(OSError: [Errno 28] No space left on device) and every other rank skipped the load")
    figs = {}
    for name, explanation in [("short", "race: rank 1 tried to load 1.0 s before rank 0 finished saving"),
                              ("long", long)]:
        run = tmp_path / name
        events = made_run(run, explanation)
        fig = figs[name] = timeline_figure(run, events)
        assert_timeline_fits(fig, explanation)
        ax = fig.axes[0]
        assert ax.get_xlim()[0] == 0  # not the launcher's start-up: the first rank starts at 0
        assert min(p.get_x() for p in ax.patches) == 0
        assert "seconds since the first rank started (the launcher took 5.0 s before it)" in ax.get_xlabel()
        assert [t.get_text() for t in ax.child_axes[0].get_yticklabels()] == ["loaded"] + ["missing"] * 7
    assert figs["long"].get_figheight() > figs["short"].get_figheight()  # grown to fit the title
    assert figs["long"].get_figwidth() == figs["short"].get_figwidth()


def test_a_timeline_marks_where_your_code_opened_a_checkpoint_and_names_the_file(tmp_path):
    """fix=own: the file_op events with `by` (a frame of your package) are drawn above each rank's bar, a read and
    a write each in a mark of its own, the file named at its first open; the framework's own opens are not drawn."""
    from train.report.timeline import timeline_figure

    run = tmp_path / "own"
    events = made_run(run, "race: rank 1 read mine.pt before rank 0 wrote it", n_ranks=2)
    ops = [(1006.0, 0, "w", "/team/io.py:12"), (1005.7, 1, "r", "/team/io.py:20"), (1005.8, 1, "r", "/team/io.py:20"),
           (1005.9, 1, "r", None)]  # the last: the framework's own read of the file
    events = sorted(events + [{"t": t, "rank": r, "event": "file_op", "op": "open", "path": "/run/models/mine.pt",
                               "mode": mode, **({"by": by} if by else {})} for t, r, mode, by in ops],
                    key=lambda e: e["t"])
    fig = timeline_figure(run, events)
    ax = fig.axes[0]
    marks = {(line.get_marker(), round(float(line.get_xdata()[0]), 3), round(float(line.get_ydata()[0]), 3))
             for line in ax.lines if line.get_marker() in ("v", "^")}
    assert marks == {("^", 1.0, -0.4), ("v", 0.7, 0.6), ("v", 0.8, 0.6)}  # seconds from the first rank's start
    assert sorted(t.get_text() for t in ax.texts if "mine.pt" in t.get_text()) == [" mine.pt", " mine.pt"]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[-2:] == ["your code read this file", "your code wrote this file"]
    assert_timeline_fits(fig, "race: rank 1 read mine.pt before rank 0 wrote it")
    plain = timeline_figure(run, [e for e in events if not e.get("by")])
    assert not [line for line in plain.axes[0].lines if line.get_marker() in ("v", "^")]
    assert not any("your code" in t.get_text() for t in plain.legends[0].get_texts())


@pytest.mark.slow  # the real sweep (the `real` fixture)
def test_a_real_runs_timeline(real):
    from train.report.timeline import draw_timeline, timeline_figure

    run = Run(real["run"], real["root"] / "run")
    assert run.rc == 0, run.err[-3000:]
    assert draw_timeline(run.dir)
    assert_png(run.dir / "timeline.png")
    events = run.events
    fig = timeline_figure(run.dir, events)
    assert_timeline_fits(fig, run.summary["explanation"])
    ax = fig.axes[0]
    first = min(e["t"] for e in events if e["event"] == "rank_start")
    launched = next(e["t"] for e in events if e["event"] == "launch_start")
    assert ax.get_xlim()[0] == 0 and min(p.get_x() for p in ax.patches) == pytest.approx(0)
    assert f"(the launcher took {first - launched:.1f} s before it)" in ax.get_xlabel()
    # the bars end where the run did, not 60-80% of the way in after the launcher's start-up
    last = max(e["t"] for e in events) - first
    assert ax.get_xlim()[1] == pytest.approx(last * 1.02)


@pytest.mark.slow
def test_make_stability_counts_the_verdicts_and_the_saved_weights(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "train.report.stability", "--runs", "2", "--dir", str(tmp_path / "s"),
                           "world_size=2", "epochs=1", "skew.seconds=2"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "unsynced   2/2 race" and lines[1] == "barrier    2/2 clean"
    assert lines[2].startswith("saved weights: 1 digest(s) over 4 runs: ")
    record = json.loads((tmp_path / "s/stability.json").read_text())
    assert record["verdicts"] == {"unsynced": {"race": 2}, "barrier": {"clean": 2}}
