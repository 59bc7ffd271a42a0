"""The scenario x fix matrix of a sweep, for each framework: matrix.csv, matrix.md and matrix.png.

Rows are scenarios (what goes wrong), columns are fixes (how the ranks sync); with several frameworks,
matrix.md has a grid per framework and matrix.png one grid with the framework as the outer row group. Each cell holds
what every rank of every run of that pair ended up with: the runs, how many raced out of those
that gave a verdict (with a 95% Wilson interval), the runs that did not count, the dominant
verdict and the dominant rank outcome. Built from train/report/runs.py's rows (one per run).
"""
from collections import Counter
from pathlib import Path

import yaml

from train.config import CONFIGS
from train.judge.vocabulary import OUTCOMES
from train.report import rates
from train.report.files import save_png_atomic

ORDER = yaml.safe_load((CONFIGS / "order.yaml").read_text())  # the grids', rows' and columns' order
SCENARIO_ORDER, FIX_ORDER, FRAMEWORK_ORDER = ORDER["scenarios"], ORDER["fixes"], ORDER["frameworks"]
COLOURS = {"clean": "#a1d99b", "save_failed": "#9ecae1", "race": "#fc9272", "error": "#bdbdbd",
           "interrupted": "#bdbdbd", "n/a": "#f0f0f0", "crashed": "#bdbdbd"}
TITLE = "What every rank ended up with in {frameworks}: scenario (what goes wrong) x fix"
EXPLAINED = ("Each cell: the dominant verdict, as how many of the runs that gave a verdict had it and its 95% "
             "Wilson interval (`race 5/5 (57–100%)`: 5 of 5 runs raced; the true rate is 57–100% with 95% "
             "confidence); the race count too when another verdict dominates; then the outcome most ranks had "
             "when not `loaded`. Runs that were interrupted, whose harness failed or that crashed are not counted: "
             "they are listed apart. n/a: the fix does not apply to that scenario (see the scenario's file).")
FIELDS = ["framework", "scenario", "fix", "runs", "counted", "races", "race_rate", "ci_low", "ci_high", "not_counted",
          "not_counted_verdicts", "verdict", "verdict_runs", "outcome", "replicas_diverged", "note"]
# which verdict a cell shows when two are equally common
WORSE_FIRST = ["race", "save_failed", "clean", "error", "crashed", "interrupted"]


def _rank(name, preferred):
    return preferred.index(name) if name in preferred else len(preferred)


def _order(names, preferred):
    return sorted(names, key=lambda n: (_rank(n, preferred), n))


def cell(rows: list) -> dict:
    """What one (scenario, fix) pair gave over its runs. The race rate and its interval count only the
    runs with a verdict on the race; the others (rates.NOT_COUNTED) are counted apart. The verdict, the
    outcomes and the diverged replicas come from the counted runs, or from the others when none counted."""
    ran = [r for r in rows if r["verdict"] != "n/a"]
    if not ran:
        return {"runs": 0, "counted": 0, "races": 0, "race_rate": "", "ci_low": "", "ci_high": "",
                "not_counted": 0, "not_counted_verdicts": "", "verdict": "n/a", "verdict_runs": 0, "outcome": "",
                "replicas_diverged": "", "note": rows[0]["note"]}
    counted = [r for r in ran if r["verdict"] not in rates.NOT_COUNTED]
    apart = [r for r in ran if r["verdict"] in rates.NOT_COUNTED]
    basis = counted or apart
    verdicts = Counter(r["verdict"] for r in basis)
    verdict = min(verdicts, key=lambda v: (-verdicts[v], _rank(v, WORSE_FIRST)))  # a tie: the worse
    outcomes = Counter()
    for r in basis:
        outcomes.update({o: int(r[f"n_{o}"]) for o in OUTCOMES if int(r.get(f"n_{o}") or 0)})  # none: older
    not_loaded = Counter({o: n for o, n in outcomes.items() if o != "loaded"}) or outcomes
    # the two commonest outcomes, the worse first on a tie (OUTCOMES runs from good to bad)
    top = sorted(not_loaded, key=lambda o: (-not_loaded[o], -OUTCOMES.index(o)))[:2]
    races = sum(r["verdict"] == "race" for r in counted)
    low, high = (round(x, 3) for x in rates.interval(races, len(counted))) if counted else ("", "")
    return {"runs": len(ran), "counted": len(counted), "races": races,
            "race_rate": round(races / len(counted), 3) if counted else "", "ci_low": low, "ci_high": high,
            "not_counted": len(apart), "not_counted_verdicts": rates.counts(r["verdict"] for r in apart),
            "verdict": verdict, "verdict_runs": verdicts[verdict], "outcome": ", ".join(top),
            "replicas_diverged": sum(r["replicas"] == "diverged" for r in basis), "note": ""}


def build(rows: list) -> list:
    """A cell per (framework, scenario, fix) that was run, frameworks, scenarios and fixes in their order."""
    pairs = {}
    for r in rows:
        pairs.setdefault((r.get("framework", "fastai"), r["scenario"], r["fix"]), []).append(r)
    out = []
    for framework in _order({k[0] for k in pairs}, FRAMEWORK_ORDER):
        for scenario in _order({k[1] for k in pairs}, SCENARIO_ORDER):
            for fix in _order({k[2] for k in pairs}, FIX_ORDER):
                if (framework, scenario, fix) in pairs:
                    out.append({"framework": framework, "scenario": scenario, "fix": fix,
                                **cell(pairs[(framework, scenario, fix)])})
    return out


def frameworks(cells: list) -> list:
    return _order({c.get("framework", "fastai") for c in cells}, FRAMEWORK_ORDER)


def named(names) -> str:
    """Frameworks in words: `fastai`, `fastai and lightning`, `fastai, lightning and accelerate`."""
    names = list(names)
    return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]])) if names else "no framework"


def title(cells: list) -> str:
    """The matrix's title, naming the frameworks it shows."""
    return TITLE.format(frameworks=named(frameworks(cells)))


def cited(references: dict, scenario: str, framework: str) -> str:
    """The reports a scenario reproduces in this framework (its `reproduces` key, train/report/matrix_files.py):
    those about this framework, then those about every framework; a report about another framework, never."""
    mine = references.get(scenario) or {}
    return ", ".join(dict.fromkeys([*mine.get(framework, []), *mine.get("all", [])]))


def fixes_shown(cells: list) -> list:
    """The fixes with a cell that ran: a column that is n/a all the way down (a fix this framework has no
    seam for) is left out; its reason stays in matrix.csv."""
    return _order({c["fix"] for c in cells if c["verdict"] != "n/a"} or {c["fix"] for c in cells}, FIX_ORDER)


def scenarios_shown(cells: list) -> list:
    """The scenarios with a cell that ran: a row that is n/a all the way across (a resume scenario in fastai's
    grid, say) is left out; its reasons stay in matrix.csv."""
    return _order({c["scenario"] for c in cells if c["verdict"] != "n/a"} or {c["scenario"] for c in cells},
                  SCENARIO_ORDER)


def label(c: dict) -> str:
    """The cell's text, a line per fact: `race 5/5 (57–100%)` (the dominant verdict's count over the
    counted runs, with its 95% interval), the race count when another verdict dominates, the
    commonest outcomes when not `loaded`, whether the replicas diverged, and the runs not counted."""
    if c["verdict"] == "n/a":
        return "n/a"
    if not c["counted"]:
        return "\n".join(filter(None, ["no verdict", c["not_counted_verdicts"], c["outcome"]]))
    lines = [rates.label(c["verdict"], c["verdict_runs"], c["counted"])]
    if c["verdict"] != "race" and c["races"]:
        lines.append(rates.label("race", c["races"], c["counted"]))
    if c["outcome"] and c["outcome"] != "loaded":
        lines.append(c["outcome"])
    if c["replicas_diverged"] * 2 > c["counted"]:
        lines.append("replicas diverged")
    if c["not_counted"]:
        lines.append(f"not counted: {c['not_counted_verdicts']}")
    return "\n".join(lines)


def md_label(c: dict) -> str:
    first, *rest = label(c).split("\n")
    return f"**{first}**" + (f" ({'; '.join(rest)})" if rest else "")


def markdown(cells: list, references: dict) -> str:
    """The grid as a markdown table under its framework's name, a table for each framework; each scenario
    cites the reports it reproduces in that framework (references: train/report/matrix_files.py's)."""
    return "\n\n".join(f"### {name}\n\n" + grid([c for c in cells if c.get("framework", "fastai") == name],
                                                  references, name) for name in frameworks(cells))


def grid(cells: list, references: dict, framework: str) -> str:
    fixes = fixes_shown(cells)
    scenarios = scenarios_shown(cells)
    by = {(c["scenario"], c["fix"]): c for c in cells}
    lines = ["| scenario (reproduces) | " + " | ".join(fixes) + " |", "| --- |" + " --- |" * len(fixes)]
    for s in scenarios:
        ref = f" ({cited(references, s, framework)})" if cited(references, s, framework) else ""
        row = [md_label(by[(s, f)]) if (s, f) in by else "" for f in fixes]
        lines.append(f"| **{s}**{ref} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def matrix_figure(cells: list):
    """The matrix as a Figure: a coloured cell per (scenario, fix) with its label, the title
    wrapped to the figure's width and the legend below, in as many columns as fit."""
    from matplotlib.patches import Patch, Rectangle

    from train.report import figures

    fixes = fixes_shown(cells)
    several = len(frameworks(cells)) > 1
    rows = [(f, s) for f in frameworks(cells)
            for s in scenarios_shown([c for c in cells if c.get("framework", "fastai") == f])]
    by = {(c.get("framework", "fastai"), c["scenario"], c["fix"]): c for c in cells}
    fig = figures.figure(1.5 + 1.75 * len(fixes), 1)  # its height is set below, once the title is wrapped
    ax = fig.subplots()
    for y, (framework, s) in enumerate(rows):
        for x, f in enumerate(fixes):
            c = by.get((framework, s, f))
            if c is None:
                continue
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=COLOURS.get(c["verdict"], "#ffffff"), edgecolor="white",
                                   linewidth=2))
            ax.text(x + 0.5, y + 0.5, label(c), ha="center", va="center", fontsize=8)
    ax.set_xlim(0, len(fixes))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([i + 0.5 for i in range(len(fixes))], fixes)
    ax.set_yticks([i + 0.5 for i in range(len(rows))], [f"{f}: {s}" if several else s for f, s in rows])
    for y in range(1, len(rows)):
        if rows[y][0] != rows[y - 1][0]:  # a line between one framework's rows and the next's
            ax.axhline(y, color="#636363", linewidth=1.5)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    present = [v for v in COLOURS if v in {c["verdict"] for c in cells}]
    key = figures.legend(fig, [Patch(color=COLOURS[v], label=v) for v in present], fontsize=8)
    title_text = fig.suptitle(figures.wrap(fig, title(cells), fontsize=10), fontsize=10)
    figures.grow_to_fit(fig, 0.5 + 0.85 * len(rows), title_text, key)  # the cells and the fix names, then title and legend
    return fig


def plot(cells: list, path: Path):
    save_png_atomic(matrix_figure(cells), path)
