"""race-lab check's card: one row per scenario (held or raced, with the count and its interval, what happened, and
for a race the fixes that hold it), then one line: safe or unsafe, and the change that holds every row.
Pure functions over the runs' summaries, the check's plan (train/launch/check.py) and the measured matrix
(train/report/measured.py); check.json, check.md and the console's card are all made from `result`.
"""
import textwrap
from collections import Counter

from train.frameworks import registry
from train.report import rates
from train.report.measured import FIRST_CHOICE, holds_with, recommended

HELD = ("clean", "save_failed")  # save_failed: every rank on the same weights, and each says the save failed
NOT_COUNTED = rates.NOT_COUNTED
NOT_CHECKED = "not_checked"  # a scenario a class of yours cannot run in: neither held nor raced
FIX_DOCS = "docs/fixes/{framework}.md"  # the rank0_leads file of that framework, to copy (docs/fixes/)
FILE_DOCS = "docs/fixes/{framework}-{fix}.md"  # another fix that is a file to copy (the contract's files_to_copy)
FRAMEWORK_DOCS = "docs/frameworks.md"  # each framework's section says what its other fixes do
ASYNC_DOCS = "docs/async.md"  # the async saves' fixes (check.saves=async)


def fix_docs(framework: str, fix, saves: str = "sync"):
    """Where the card sends the reader for `fix`: docs/fixes/<framework>.md for rank0_leads (the file to copy),
    docs/fixes/<framework>-<fix>.md for another file to copy, docs/async.md for an async save's fix, else
    docs/frameworks.md (DeepSpeed's atomic and agreed have no page of their own); None for no fix."""
    if not fix:
        return None
    if framework in registry.names() and fix in registry.get(framework).files_to_copy:
        return FILE_DOCS.format(framework=framework, fix=fix)
    if saves == "async":
        return ASYNC_DOCS
    page = FIX_DOCS.format(framework=framework)
    return page if fix == FIRST_CHOICE else FRAMEWORK_DOCS


def _most_common(texts) -> str:
    found = Counter(t for t in texts if t)
    return found.most_common(1)[0][0] if found else ""


def scenario_row(name: str, workload: str, summaries: list, measured: dict) -> dict:
    """One scenario that ran: how many of its runs counted, how many raced, the 95% Wilson interval of the race
    rate, and the explanation most of its runs had (the raced ones', when any raced)."""
    counted = [s for s in summaries if s["verdict"] not in NOT_COUNTED]
    raced = [s for s in counted if s["verdict"] not in HELD]
    not_counted = len(summaries) - len(counted)
    low, high = rates.interval(len(raced), len(counted)) if counted else (0.0, 1.0)
    verdict = "raced" if raced else "held" if counted and not not_counted else "error"
    shown = raced or counted or summaries
    return {"name": name, "workload": workload, "verdict": verdict, "counted": len(counted), "races": len(raced),
            "not_counted": not_counted, "ci_low": round(low, 3), "ci_high": round(high, 3),
            "explanation": _most_common(s.get("explanation", "") for s in shown),
            "holds_with": holds_with(measured, name)}


def no_run_row(name: str, workload: str, verdict: str, explanation: str, measured: dict) -> dict:
    """A scenario with no runs: an n/a cell that counts against a shipped fix (raced), or one a class of yours
    cannot run (NOT_CHECKED: neither held nor raced)."""
    return {"name": name, "workload": workload, "verdict": verdict, "counted": 0, "races": 0, "not_counted": 0,
            "ci_low": 0.0, "ci_high": 1.0, "explanation": explanation, "holds_with": holds_with(measured, name)}


def result(plan: dict, summaries_by_scenario: dict, measured: dict) -> dict:
    """check.json: the verdict, the framework and class, one entry per scenario, what was left out and why, and
    the fix that holds every scenario. An n/a cell counts against a shipped fix; for a class of yours it is not
    checked (plan["strict"]: it fails the check too)."""
    rows = []
    for s in plan["scenarios"]:
        if s.get("cannot") and plan["fix"] == "own":
            rows.append(no_run_row(s["name"], s["workload"], NOT_CHECKED, f"not checked: {s['cannot']}", measured))
        elif s.get("cannot"):
            rows.append(no_run_row(s["name"], s["workload"], "raced", f"not held: n/a for this fix ({s['cannot']})",
                                   measured))
        else:
            rows.append(scenario_row(s["name"], s["workload"], summaries_by_scenario.get(s["name"], []), measured))
    errors = [r["name"] for r in rows if r["verdict"] == "error"]
    raced = [r["name"] for r in rows if r["verdict"] == "raced"]
    unchecked = [r["name"] for r in rows if r["verdict"] == NOT_CHECKED]
    verdict = "error" if errors else "unsafe" if raced or (unchecked and plan.get("strict")) else "safe"
    names = [r["name"] for r in rows]
    best = plan["fix"] if verdict == "safe" else recommended(measured, names)
    return {"verdict": verdict, "framework": plan["framework"], "fix": plan["fix"], "class": plan.get("class"),
            "repeats": plan["repeats"], "world_size": plan["world_size"], "setup": plan["setup"],
            "scenarios": rows, "left_out": plan["left_out"], "recommended": best,
            "fix_docs": fix_docs(plan["framework"], best, plan["setup"].get("saves", "sync")), "errors": errors,
            "strict": bool(plan.get("strict"))}


def row_result(row: dict) -> str:
    if row["verdict"] == "error":
        return f"no verdict ({row['not_counted']} run(s) failed)"
    if row["verdict"] == NOT_CHECKED:
        return "not checked"
    if not row["counted"]:
        return "n/a: counts as raced"
    return f"{row['verdict']}: race {rates.share(row['races'], row['counted'])}"


def what_was_checked(result_: dict) -> str:
    cls = result_.get("class")
    return f"framework={result_['framework']} fix={result_['fix']}" + (f" ({cls})" if cls else "")


def not_checkable(rows: list, strict: bool) -> str:
    """`M not checkable (names: why; how to check them)`, or '' when every scenario was checked."""
    unchecked = [r for r in rows if r["verdict"] == NOT_CHECKED]
    if not unchecked:
        return ""
    whys = Counter(r["explanation"].removeprefix("not checked: ") for r in unchecked)
    how = ("if your jobs never restart, check.restarts=false leaves them out" if
           all(r["workload"] == "resume" for r in unchecked) else "a shipped fix of this framework checks them")
    gate = "check.strict=true fails the check on them" if not strict else "check.strict=true: they fail the check"
    return (f"{len(unchecked)} not checkable ({', '.join(r['name'] for r in unchecked)}: "
            f"{'; '.join(whys)}; {how}; {gate})")


def last_line(result_: dict) -> str:
    """safe: held all N scenarios | unsafe: raced in K of N (...); the change that holds all N: <fix> (docs). For a
    class of yours with scenarios it cannot run: safe on the N checked; M not checkable (...)."""
    rows = result_["scenarios"]
    unchecked = not_checkable(rows, result_.get("strict", False))
    n = len([r for r in rows if r["verdict"] != NOT_CHECKED])
    if result_["verdict"] == "safe":
        return f"safe on the {n} checked; {unchecked}" if unchecked else f"safe: held all {n} scenarios"
    if result_["verdict"] == "error":
        return (f"error: no verdict for {', '.join(result_['errors'])}: the harness failed there (their runs' "
                "logs say why); not a race")
    raced = [r["name"] for r in rows if r["verdict"] == "raced"]
    if not raced:
        return f"unsafe: held the {n} checked; {unchecked}"
    line = f"unsafe: raced in {len(raced)} of {n}{' checked' if unchecked else ''} ({', '.join(raced)})"
    if unchecked:
        line += f"; {unchecked}"
    if result_["recommended"]:
        return line + f"; the change that holds all {len(rows)}: fix={result_['recommended']} ({result_['fix_docs']})"
    return line + f"; no fix measured for {result_['framework']} holds all {len(rows)}"


WIDTH = 120  # the card's columns where the terminal's are not known (a CI log, a pipe)


def fitted(text: str, width: int) -> str:
    """text in at most `width` characters: cut, with an ellipsis, where it is longer."""
    return text if len(text) <= width else text[:max(width - 1, 0)].rstrip() + "…"


def gist(explanation: str) -> str:
    """A run's sentence, its first clause: what happened, not every detail (check.md keeps the whole)."""
    return explanation.split("; ")[0].split(". The trap")[0]


def card(result_: dict, width: int = WIDTH) -> str:
    """The console's card, each line within `width`: a header, a row per scenario (its result and the gist of what
    happened), for a race the fixes that hold it, the left-out scenarios in one line, then the answer. The whole
    sentences and the reasons are in check.md, check.json and check.html."""
    header = (f"race-lab check: {what_was_checked(result_)}, {result_['repeats']} run(s) of each scenario, "
              f"{result_['world_size']} ranks")
    lines = [fitted(header, width)]
    name_w = max((len(r["name"]) for r in result_["scenarios"]), default=8)
    for r in result_["scenarios"]:
        row = f"  {r['name']:<{name_w}}  {r['workload']:<9}  {row_result(r):<26}  "
        lines.append(row + fitted(gist(r["explanation"]), width - len(row)))
        if r["verdict"] == "raced":
            held_by = ", ".join(r["holds_with"]) or "none measured"
            lines.append(fitted(f"  {'':<{name_w}}  {'':<9}  holds with: {held_by}", width))
    left = [left["name"] for left in result_["left_out"]]
    if left:
        lines.append(fitted(f"  left out {len(left)} (why: check.md): {', '.join(left)}", width))
    lines.append(textwrap.fill(last_line(result_), width, subsequent_indent="  ", break_on_hyphens=False))
    return "\n".join(lines)


def markdown(result_: dict) -> str:
    """check.md: the card as a table."""
    out = [f"# race-lab check: {what_was_checked(result_)}", "",
           f"{result_['repeats']} run(s) of each scenario, {result_['world_size']} ranks; setup: "
           + ", ".join(f"{k}={v}" for k, v in result_["setup"].items()), "",
           "| scenario | workload | result | what happened | holds with |", "| --- | --- | --- | --- | --- |"]
    for r in result_["scenarios"]:
        out.append(f"| {r['name']} | {r['workload']} | {row_result(r)} | {r['explanation'].replace('|', '/')} | "
                   f"{', '.join(r['holds_with'])} |")
    if result_["left_out"]:
        out += ["", "Left out (cannot happen in this setup or framework):", ""]
        out += [f"- {left['name']}: {left['why']}" for left in result_["left_out"]]
    return "\n".join(out + ["", f"**{last_line(result_)}**", ""])
