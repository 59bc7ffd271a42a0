"""An interrupt stops everything at once: a terminal's Ctrl-C (SIGINT to the whole process group) or a
SIGINT to the launcher alone, sent while ranks train, stall or wait in a barrier. Exit 130 at once (well before
any timeout would end the run), verdict `interrupted`, every rank's records kept (with the signal it took), no
save or load after the signal, and no process left: for a single run, a sweep's job and the one-host nodes form."""
import json

import pytest

from conftest import processes_tagged
from helpers.interrupts import STOP_WITHIN_S, assert_stopped_at_once, events_below, interrupt, went_on_after_the_signal

def stalled_and_waiting(events):
    return {(e["rank"], e["event"]) for e in events} >= {(0, "skew_start"), (1, "sync_enter")}


def both_training(events):
    """Both ranks have begun to fit (at a fixed time after rank 0 alone, rank 1 of fix=unsynced, which never waits,
    could be recording `final` on a loaded machine as the signal came)."""
    return {(e["rank"], e["event"]) for e in events} >= {(0, "fit_start"), (1, "fit_start")}


def test_ctrl_c_stops_a_run_at_once_and_nothing_saves_or_loads_after_it(tmp_path):
    run_dir = tmp_path / "run"
    rc, took, sent, out = interrupt(run_dir, [f"hydra.run.dir={run_dir}", "world_size=2", "skew.seconds=3"], after=0,
                                    when=both_training)
    assert_stopped_at_once(run_dir, rc, took, sent, out)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["verdict"]) == ("interrupted", "interrupted")
    assert summary["explanation"] == "interrupted: the run was stopped by SIGINT before it ended; no verdict"


@pytest.mark.slow  # make test-fast keeps the start-up case below, the one that failed before
def test_ctrl_c_stops_a_run_started_with_sigint_ignored_as_a_background_job_is(tmp_path):
    """issue 44's regression: started as a shell's `&` starts it (SIGINT ignored, inherited by the forkserver and
    the ranks), a SIGINT to the group went unheard by the ranks, which trained, saved and loaded on."""
    run_dir = tmp_path / "run"
    rc, took, sent, out = interrupt(run_dir, [f"hydra.run.dir={run_dir}", "world_size=2", "skew.seconds=3"], after=0,
                                    when=both_training, sigint_ignored=True)
    assert_stopped_at_once(run_dir, rc, took, sent, out)


def test_ctrl_c_at_start_up_before_the_run_begins_exits_130_without_a_traceback(tmp_path):
    """SIGINT to the group while the launcher still starts (Hydra composing, before launch_start), SIGINT ignored
    by the shell that started it: an interrupt, exit 130, no run recorded."""
    run_dir = tmp_path / "run"
    rc, took, sent, out = interrupt(run_dir, [f"hydra.run.dir={run_dir}", "world_size=2"], after=0.3,
                                    when=lambda events: True, sigint_ignored=True)
    assert rc == 130 and took < STOP_WITHIN_S, out[-3000:]
    assert "Traceback" not in out and not processes_tagged(str(run_dir))
    assert not [e for e in events_below(run_dir) if e["event"] in ("save_end", "load_done")]


def test_sigint_to_the_launcher_alone_stops_ranks_in_a_stall_and_a_barrier(tmp_path):
    """The agent passes the SIGINT on; rank 1 is inside gloo's barrier, which a Python handler would not
    interrupt before timeout.collective_s (torch elastic then killed it after 30 s)."""
    run_dir = tmp_path / "run"
    rc, took, sent, out = interrupt(run_dir, [f"hydra.run.dir={run_dir}", "world_size=2", "fix=barrier",
                                              "skew.seconds=120"], after=0.5, whole_group=False,
                                    when=stalled_and_waiting)
    assert_stopped_at_once(run_dir, rc, took, sent, out)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"] == "interrupted"
    assert {r["outcome"] for r in summary["ranks"]} == {"aborted"}


@pytest.mark.slow  # its own cold launch, for an edge of the path the two tests above take
def test_ctrl_c_during_the_rendezvous_before_any_rank_runs_is_an_interrupt(tmp_path):
    """SIGINT that comes before torch elastic's own handlers are in place takes the same path as later."""
    run_dir = tmp_path / "run"
    rc, took, sent, out = interrupt(run_dir, [f"hydra.run.dir={run_dir}", "world_size=2"], after=0, whole_group=False,
                                    when=lambda events: any(e["event"] == "launch_start" for e in events))
    assert rc == 130, out[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["verdict"]) == ("interrupted", "interrupted")
    assert not [e for e in events_below(run_dir) if e["event"] in ("save_end", "load_done")]
    assert not processes_tagged(str(run_dir))
    assert "Traceback" not in out


@pytest.mark.slow
def test_ctrl_c_stops_a_sweep_job_at_once(tmp_path):
    sweep = tmp_path / "sweep"
    rc, took, sent, out = interrupt(sweep, ["-m", f"hydra.sweep.dir={sweep}", "world_size=2", "skew.seconds=3",
                                            "fix=unsynced,barrier"], after=1)
    assert_stopped_at_once(sweep, rc, took, sent, out)
    summaries = sorted(sweep.glob("*/summary.json"))
    assert len(summaries) == 1  # the sweep stopped with its first job
    assert json.loads(summaries[0].read_text())["verdict"] == "interrupted"


@pytest.mark.slow
def test_ctrl_c_stops_the_one_host_nodes_form_at_once(tmp_path):
    run_dir = tmp_path / "run"
    rc, took, sent, out = interrupt(run_dir, [f"hydra.run.dir={run_dir}", "scenario=no_shared_fs"], after=1)
    assert_stopped_at_once(run_dir, rc, took, sent, out)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"] == "interrupted"
    assert [(n["node_rank"], n["status"]) for n in summary["nodes"]] == [(0, "interrupted"), (1, "interrupted")]
    assert summary["explanation"] == "interrupted: the run was stopped by SIGINT before it ended; no verdict"


def a_rank_started(events):
    return any(e["event"] == "rank_start" for e in events)


@pytest.mark.slow
@pytest.mark.parametrize("moment, when, after", [
    ("planning", lambda events: True, 1.5),  # composing every scenario, importing no rank yet
    ("mid-run", a_rank_started, 1.0),  # a job's ranks running, two more jobs starting beside it
])
def test_ctrl_c_stops_a_check_at_once_at_any_moment(tmp_path, moment, when, after):
    """race-lab check: the group's SIGINT ends it with 130 whatever it is doing (a loky worker it reached mid-start
    broke the sweep's pool, and the check went on to a card of 'no verdict', exit 3), and nothing it started is
    left (a forkserver and its resource tracker outlived it by 1-4 s); each run it reached wrote its summary (the
    Ctrl-C once reached the sweep's idle job workers too, which broke its pool and killed the running jobs)."""
    out_dir = tmp_path / "check"
    rc, took, sent, out = interrupt(out_dir, ["check", "framework=torch_loop", "check.repeats=1",
                                              f"hydra.sweep.dir={out_dir}"], after=after, when=when)
    assert rc == 130, out[-3000:]
    assert took < STOP_WITHIN_S, f"the check took {took:.1f} s to stop"
    assert not processes_tagged(str(out_dir))
    assert "Traceback" not in out and out.strip().splitlines()[-1].startswith("interrupted:")
    assert went_on_after_the_signal(events_below(out_dir)) == []
    launched = [log.parent.parent for log in out_dir.glob("*/events/launcher.jsonl")]
    assert all((d / "summary.json").exists() for d in launched), launched  # each run reached stopped as one does
