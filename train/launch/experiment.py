"""One run on this host, from the launch to its summary: launch, collect, judge, write summary.json and print the table."""
import contextlib
import signal
from dataclasses import asdict
from pathlib import Path

from torch.distributed.elastic.multiprocessing.api import SignalException

from train.events import LAUNCHER, EventLog, read_events
from train.faults import describe as describe_faults
from train.judge.verdict import judge
from train.judge.vocabulary import worst_status
from train.launch import nodes
from train.launch.elastic import launch, raise_held, raise_signal_exception
from train.report import node_records
from train.report.console import format_table
from train.report.environment import environment
from train.report.files import write_json_atomic
from train.report.measured import advice, holds_with_run
from train.report.run_records import fix_name


def header(cfg: dict, plan, run_dir: Path, nodes_here: bool, one_node_of_many: bool) -> str:
    """What is run, where, and what the scenario injects, in words."""
    if nodes_here:
        where = f"\nnodes: {cfg['nnodes']} on this host, an elastic agent each, rendezvous on loopback"
    elif one_node_of_many:
        where = f"\nnode {cfg['node_rank']} of {cfg['nnodes']}, rendezvous {cfg['rdzv']['endpoint']} id {cfg['rdzv']['id']}"
    else:
        where = ""
    return (f"run dir: {run_dir}\ndevice: {plan.device}+{plan.backend} ({plan.reason})\n"
            + (f"note: {plan.note}\n" if plan.note else "") +
            f"scenario={cfg['scenario']} fix={fix_name(cfg)} framework={cfg['framework']['name']} "
            f"world_size={cfg['world_size']} "
            f"epochs={cfg['epochs']}\nfault: {describe_faults(cfg)}{where}")


def run_experiment(cfg: dict, plan, run_dir: Path, task_overrides: list, echo: bool = True) -> dict:
    """Launch, collect, classify; write summary.json and print the outcome table. One node of a
    multi-node run writes node_summary.json instead: it sees only its own ranks. Without echo (a
    sweep's job) what would be printed goes to console.log in the run dir, the ranks' output to logs/."""
    if not echo:
        with open(run_dir / "console.log", "w", encoding="utf-8") as log, contextlib.redirect_stdout(log):
            return _run_experiment(cfg, plan, run_dir, task_overrides, echo)
    return _run_experiment(cfg, plan, run_dir, task_overrides, echo)


def _run_experiment(cfg: dict, plan, run_dir: Path, task_overrides: list, echo: bool) -> dict:
    nodes_here = cfg["nnodes"] > 1 and cfg["launch"]["all_nodes_here"]
    one_node_of_many = nodes.one_of_many(cfg)
    if not node_records.merged_here():  # the node agents of launch.all_nodes_here leave the header to the run's
        print(header(cfg, plan, run_dir, nodes_here, one_node_of_many), flush=True)
    events = EventLog(run_dir, LAUNCHER, name=f"launcher-node{cfg['node_rank']}" if one_node_of_many else None)
    start = dict(world_size=cfg["world_size"], device=plan.device, backend=plan.backend, node_rank=cfg["node_rank"],
                 nnodes=cfg["nnodes"])
    if nodes_here:
        events.record("launch_start", **start)
        disk = nodes.node_disk_form(cfg)
        dirs = nodes.run_nodes_here(cfg, asdict(plan), run_dir, events, run_experiment, disk, echo)
        events.record("launch_end", status=worst_status(node_records.read_node(d)["status"] for d in dirs))
        events.close()
        summary = node_records.merge(dirs, run_dir, asdict(plan))
        node_records.print_merged(summary, run_dir)
        return summary
    before = {s: signal.signal(s, raise_signal_exception) for s in (signal.SIGINT, signal.SIGTERM)}
    try:  # a signal from launch_start on is the run's interrupt, also before launch() takes over the handlers
        events.record("launch_start", **start)
        raise_held()  # a sweep's worker took it before the run began
        status = launch(cfg, plan, run_dir, events, echo)
    except SignalException as e:
        events.record("signal", name=signal.Signals(e.sigval).name)
        status = "interrupted"
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    events.record("launch_end", status=status)
    events.close()
    if one_node_of_many:
        ranks = sorted({e["rank"] for e in read_events(run_dir) if isinstance(e["rank"], int)})
        node_records.write_node_summary(run_dir, cfg, status, {"ranks_here": ranks, "plan": asdict(plan),
                                                        "environment": environment()})
        if not node_records.merged_here():
            print(f"\nnode {cfg['node_rank']} of {cfg['nnodes']}: {status}; ranks {ranks} recorded in {run_dir}",
                  flush=True)
        return node_records.merge_if_all_here(cfg, run_dir, status)

    events = read_events(run_dir)
    verdict = judge(events, cfg["world_size"]).as_dict()
    summary = {**verdict, "status": status, "config": cfg, "plan": asdict(plan), "node_disk": node_records.disk_form(events),
               "environment": environment(cfg["framework"]["name"]), "run_dir": str(run_dir)}
    summary["holds_with"] = holds_with_run(summary)
    write_json_atomic(run_dir / "summary.json", summary)
    print("\n" + format_table(verdict) + f"\n\n{verdict['explanation']}{advice(summary)}\n"
          f"summary: {run_dir / 'summary.json'}", flush=True)
    return summary
