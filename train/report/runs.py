"""Turn runs into a report. Reads only the files runs write (summary.json, events/,
.hydra/), so it works on a sweep copied back from another machine.

  python -m train.report DIR                   a run or sweep dir -> report.csv, report.md,
                                               race_vs_skew.png, and timeline.png in each run
  python -m train.report --compare RUN RUN ..  verdicts side by side
"""
import csv
import statistics
from pathlib import Path

import yaml

from train.config import CONFIGS
from train.events import read_events
from train.judge.vocabulary import OUTCOMES, saves
from train.report import rates
from train.report.matrix import frameworks, named
from train.report.matrix_files import write_matrix
from train.report.race_vs_skew import plot_race_vs_skew
from train.report.run_records import NOT_RUN, find_runs, fix_name, read_not_run, read_summary, unreadable
from train.report.timeline import draw_timeline

FIELDS = ["job", "scenario", "framework", "fix", "skew_s", "skew_rank", "world_size", "epochs", "seed", "repeat", "status",
          "verdict", "replicas", *(f"n_{o}" for o in OUTCOMES), "nonsaver_wait_s",
          "nonsaver_read_vs_save_end_s", "wall_s", "note"]


def _median(values):
    return round(statistics.median(values), 3) if values else ""


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
        "framework": (cfg.get("framework") or {}).get("name", "fastai"), "fix": fix_name(cfg), "skew_s": cfg["skew"]["seconds"],
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


def not_run_row(s: dict) -> dict:
    """The row of a job that a sweep left out as n/a (not_run.json): as its run's row was, with no job dir."""
    cfg = s["config"]
    return {**dict.fromkeys(FIELDS, ""), "scenario": cfg.get("scenario") or "seed",
            "framework": (cfg.get("framework") or {}).get("name", "fastai"), "fix": fix_name(cfg),
            "skew_s": cfg["skew"]["seconds"], "skew_rank": cfg["skew"]["rank"], "world_size": cfg["world_size"],
            "epochs": cfg["epochs"], "seed": cfg["seed"], "repeat": cfg.get("repeat", 0), "status": s["status"],
            "verdict": s["verdict"], **{f"n_{o}": 0 for o in OUTCOMES}, "note": s["explanation"]}


def fix_of(row) -> str:
    """The fix, named with its framework where that is not fastai: lightning:as_shipped."""
    framework = row.get("framework", "fastai")
    return row["fix"] if framework == "fastai" else f"{framework}:{row['fix']}"


def aggregate(rows) -> list:
    """Per (scenario, fix, world size, skew): runs, races out of the runs that gave a verdict with
    its 95% interval, the runs not counted (rates.NOT_COUNTED), outcome counts and median waits."""
    groups = {}
    for row in rows:
        if row["verdict"] != "n/a":
            groups.setdefault((row["scenario"], fix_of(row), row["world_size"], float(row["skew_s"])),
                              []).append(row)
    out = []
    for (scenario, fix, ws, skew), group in sorted(groups.items()):
        counted = [r for r in group if r["verdict"] not in rates.NOT_COUNTED]
        races = sum(r["verdict"] == "race" for r in counted)
        low, high = rates.interval(races, len(counted)) if counted else (None, None)
        counts = {o: sum(r[f"n_{o}"] for r in counted) for o in OUTCOMES}
        out.append({
            "scenario": scenario, "fix": fix, "world_size": ws, "skew_s": skew, "runs": len(group),
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
    lines = ["| scenario | fix | world size | skew (s) | runs | race rate (95% CI) | not counted | "
             "outcomes (counted runs, all ranks) | median sync wait (s) | median read vs save end (s) |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |"]
    for g in groups:
        rate = "-" if not g["counted"] else rates.share(g["races"], g["counted"])
        lines.append(f"| {g['scenario']} | {g['fix']} | {g['world_size']} | {g['skew_s']:g} | {g['runs']} | "
                     f"{rate} | {g['not_counted'] or '-'} | {g['outcomes'] or '-'} | "
                     f"{g['wait_s'] if g['wait_s'] != '' else '-'} | {g['read_s'] if g['read_s'] != '' else '-'} |")
    return "\n".join(lines)


def write_report(root, drawn=frozenset()) -> str:
    """Write report.csv, report.md, race_vs_skew.png into root and timeline.png into each run,
    except the runs in drawn (a sweep draws each job's timeline while the next job runs)."""
    root = Path(root)
    runs = find_runs(root)
    skipped = []  # what could not be read, each with its reason: said in one line at the end
    try:
        left_out = [not_run_row(s) for s in read_not_run(root)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        left_out = []
        skipped.append(f"{NOT_RUN}: its n/a jobs left out of the report ({unreadable(e)})")
    if not runs and not left_out:
        raise SystemExit(f"error: no runs under {root} (a run dir has a .hydra/ folder)")
    events = {run: read_events(run, skipped) for run in runs}
    rows = []
    for run in list(runs):
        try:
            rows.append(run_row(root, run, events[run]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError) as e:
            skipped.append(f"{run.relative_to(root) or run.name}: left out of the report ({unreadable(e)})")
            runs.remove(run)
    rows += left_out
    if not rows:
        raise SystemExit(f"error: no readable runs under {root}: " + "; ".join(skipped))
    with open(root / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    groups = aggregate(rows)
    table = markdown(groups)
    names = named(frameworks(rows))
    (root / "report.md").write_text(f"# Report: {names} ({root.name})\n\n{len(rows)} runs.\n\n{table}\n\n"
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
    if len({(r["scenario"], r["fix"]) for r in rows}) > 1:
        out += f"\n\n{write_matrix(root, rows, CONFIGS)}\n\nmatrix: {root / 'matrix.md'}, {root / 'matrix.png'}, {root / 'matrix.html'}"
    return out
