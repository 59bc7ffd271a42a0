"""The jobs' progress on the console (train/launch/progress.py): a line every tenth of the jobs with no terminal,
rich's bar on a real terminal (a pseudo-terminal here), and the sweep's line a job that race-lab check reads."""
import io
import os
import pty

from train.launch.progress import JobsProgress, tally
from train.launch.sweep import job_line, verdict_of_job_line


def test_a_jobs_verdict_counts_as_held_raced_or_no_verdict_as_the_check_counts_a_run():
    assert [tally(v) for v in ("clean", "save_failed", "race", "race (missed expect)", "crashed", "error",
                               "interrupted", "bad config")] == \
        ["held", "held", "raced", "raced", "no verdict", "no verdict", "no verdict", "no verdict"]


def test_with_no_terminal_a_line_each_tenth_of_the_jobs_with_the_counts_so_far_but_the_last():
    out = io.StringIO()
    progress = JobsProgress(55, "[check]", out=out)
    for k in range(55):
        progress.ended("race" if k % 11 == 0 else "crashed" if k == 7 else "clean")
    progress.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 9, lines  # the last job's line would come just before the card or report
    assert lines[0].startswith("[check] 6 of 55 jobs (10%): 5 held, 1 raced; ~")
    assert lines[1].startswith("[check] 11 of 55 jobs (20%): 9 held, 1 raced, 1 no verdict; ~")
    assert lines[-1].startswith("[check] 50 of 55 jobs (90%): 44 held, 5 raced, 1 no verdict; ~")
    few = io.StringIO()
    progress = JobsProgress(3, "[sweep]", out=few)
    for verdict in ("clean", "race", "clean"):
        progress.ended(verdict)
    assert [line.split(":")[0] for line in few.getvalue().splitlines()] == [
        "[sweep] 1 of 3 jobs (33%)", "[sweep] 2 of 3 jobs (66%)"]


def test_the_time_left_is_the_time_so_far_over_the_jobs_done_times_the_jobs_left():
    progress = JobsProgress(4, "[sweep]", out=io.StringIO())
    assert progress.so_far() == "0 held, 0 raced"
    progress.ended("clean")
    progress.started -= 25  # 25 s for the first job (whether it ran alone or beside others): 75 s for the other 3
    assert progress.so_far().endswith("; ~1m15s left")


def test_on_a_terminal_it_is_one_bar_redrawn_in_place_with_lines_said_above_it():
    leader, follower = pty.openpty()
    with open(follower, "w", encoding="utf-8") as terminal:
        progress = JobsProgress(4, "[check]", out=terminal)
        assert progress.bar is not None
        for verdict in ("clean", "race"):
            progress.ended(verdict)
        progress.say("error: one line above the bar")
        for verdict in ("clean", "clean"):
            progress.ended(verdict)
        progress.close()
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    text = shown.decode("utf-8", "replace")
    assert "\x1b[" in text and "━" in text  # drawn and redrawn in place: cursor moves, rich's bar
    assert "4/4" in text and "3 held, 1 raced" in text
    assert "error: one line above the bar" in text
    assert "jobs (" not in text  # no plain tenth lines on a terminal


def test_the_sweeps_line_a_job_gives_its_verdict_back():
    assert verdict_of_job_line(job_line(3, 55, "scenario=seed repeat=2", "race (missed expect)", 12.34) + "\n") == \
        "race (missed expect)"
    assert verdict_of_job_line(job_line(1, 2, "fix=barrier", "crashed", 1.0)) == "crashed"
    assert verdict_of_job_line("[sweep] 4 jobs into runs/x, 3 at a time") is None
    assert verdict_of_job_line("error: skew.rank=5: must be a rank in 0..1") is None
