"""Several nodes' records as one run: each node's node_summary.json, the check that they belong together, and the merge into one summary."""
import json
import os
import shutil
import time
from pathlib import Path

from train.config import ConfigError
from train.events import events_dir, read_events
from train.judge.verdict import judge
from train.judge.vocabulary import worst_status
from train.report.console import format_table
from train.report.files import write_json_atomic
from train.report.measured import advice, holds_with_run

NODE_SUMMARY = "node_summary.json"


def node_dir(run_dir: Path, node_rank: int) -> Path:
    return run_dir / "nodes" / f"node{node_rank}"


def merge_if_all_here(cfg: dict, records: Path, status: str) -> dict:
    """Node 0 merges when every node's records land in the same run dir (a shared filesystem, as under
    Slurm) within timeout.collective_s; else it says how to merge. Returns what main needs."""
    run_dir = records.parent.parent
    if cfg["node_rank"] != 0 or merged_here():
        return {"status": status, "verdict": None}
    dirs = [node_dir(run_dir, k) for k in range(cfg["nnodes"])]
    deadline = time.monotonic() + cfg["timeout"]["collective_s"]
    while not all((d / NODE_SUMMARY).exists() for d in dirs) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not all((d / NODE_SUMMARY).exists() for d in dirs):
        print("The verdict needs every node's records: python -m train.report --merge <each node's "
              "nodes/node<K> dir>", flush=True)
        return {"status": status, "verdict": None}
    summary = merge(dirs, run_dir)
    print_merged(summary, run_dir)
    return summary


def write_node_summary(run_dir: Path, cfg: dict, status: str, extra: dict) -> dict:
    summary = {"status": status, "node_rank": cfg["node_rank"], "nnodes": cfg["nnodes"], "rdzv": cfg["rdzv"],
               "config": cfg, "run_dir": str(run_dir), **extra}
    write_json_atomic(run_dir / NODE_SUMMARY, summary)
    return summary


def read_node(run_dir: Path) -> dict:
    path = Path(run_dir) / NODE_SUMMARY
    if not path.exists():
        raise ConfigError(f"{run_dir}: no {NODE_SUMMARY} (not the run dir of one node of a multi-node run)")
    try:
        node = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: unreadable ({type(e).__name__}), cut short by a crash?") from None
    keys = {"node_rank", "nnodes", "rdzv", "config", "status"}
    if not isinstance(node, dict) or not keys <= set(node) or not isinstance(node.get("rdzv"), dict):
        raise ConfigError(f"{path}: not a node summary (it lacks {', '.join(sorted(keys - set(node or {})))})")
    return node


def check_same_run(nodes: list, dirs: list):
    """One line and ConfigError unless these are every node of one run, each once."""
    first = nodes[0]
    for node, d in zip(nodes, dirs):
        if node["rdzv"]["id"] != first["rdzv"]["id"]:
            raise ConfigError(f"{d}: rdzv.id={node['rdzv']['id']!r}, but {dirs[0]} has {first['rdzv']['id']!r}: "
                              "these dirs belong to different runs")
    ranks = sorted(n["node_rank"] for n in nodes)
    if len(set(ranks)) != len(ranks):
        raise ConfigError(f"two of these dirs are the same node ({ranks})")
    missing = sorted(set(range(first["nnodes"])) - set(ranks))
    if missing:
        raise ConfigError(f"node(s) {', '.join(map(str, missing))} of {first['nnodes']} missing: give every node's "
                          "run dir")


def merge(node_dirs: list, out: Path, plan=None) -> dict:
    """Every node's records into `out` (events/, logs/node<K>/), judged as one run: summary.json."""
    nodes = [read_node(d) for d in node_dirs]
    check_same_run(nodes, node_dirs)
    events_dir(out).mkdir(parents=True, exist_ok=True)
    for d, node in zip(node_dirs, nodes):
        for f in events_dir(d).glob("*.jsonl"):
            name = f.name if f.name.startswith("rank") else f"launcher-node{node['node_rank']}.jsonl"
            shutil.copyfile(f, events_dir(out) / name)
        if (Path(d) / "logs").exists() and out.resolve() not in Path(d).resolve().parents:
            shutil.copytree(Path(d) / "logs", out / "logs" / f"node{node['node_rank']}", dirs_exist_ok=True)
    cfg = next(n for n in nodes if n["node_rank"] == 0)["config"]
    events = read_events(out)
    verdict = judge(events, cfg["world_size"]).as_dict()
    summary = {**verdict, "status": worst_status(n["status"] for n in nodes), "config": cfg,
               "node_disk": disk_form(events),
               "plan": plan or nodes[0].get("plan"), "environment": nodes[0].get("environment"),
               "nodes": [{"node_rank": n["node_rank"], "status": n["status"], "run_dir": n["run_dir"]}
                         for n in nodes], "run_dir": str(out)}
    summary["holds_with"] = holds_with_run(summary)
    write_json_atomic(out / "summary.json", summary)
    return summary


def disk_form(events) -> str:
    """shared | folder | mount: how the run's nodes kept their checkpoints, as its ranks recorded it."""
    forms = sorted({e.get("node_disk", "shared") for e in events if e["event"] == "rank_start"})
    return ",".join(forms) or "unknown"


def print_merged(summary: dict, out: Path):
    nodes = "".join(f"\nnode {n['node_rank']} of {len(summary['nodes'])}: {n['status']}; records in {n['run_dir']}"
                    for n in sorted(summary.get("nodes", []), key=lambda n: n["node_rank"]))
    print(nodes + "\n\n" + format_table(summary) + f"\n\n{summary['explanation']}{advice(summary)}\n"
          f"summary: {out / 'summary.json'}", flush=True)


MERGED_INTO = "RACE_LAB_MERGED_INTO"  # set in the node agents of launch.all_nodes_here: the run dir they merge into


def merged_here() -> bool:
    """This launcher is one node of launch.all_nodes_here: the launcher that started it speaks for the run."""
    return bool(os.environ.get(MERGED_INTO))
