"""matrix.html: the scenario x fix matrix as one static page, written beside matrix.md.

No server and no other file: the data is JSON inside the page and plain JS draws the grid from it.
Clicking a cell lists its runs (verdict, explanation, duration, timeline.png) with links to each
run's summary.json and logs/. Every link is relative to the page, so the sweep dir works from
wherever it is copied. Text from runs reaches the page only as JSON (with <, > and & escaped) and
the DOM's textContent, never as markup.
"""
import html
import json
import re
from pathlib import Path
from urllib.parse import quote

from train.report.matrix import (
    COLOURS,
    EXPLAINED,
    cited,
    fixes_shown,
    frameworks,
    label,
    named,
    scenarios_shown,
    title,
)

NO_SUMMARY = "no summary.json: the job died before it recorded a verdict"


def run_entry(root: Path, row: dict) -> dict:
    """One run as the page lists it, from its report row and its dir (the explanation is in summary.json)."""
    run = root / row["job"]
    try:
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):  # none (the job died first), or one cut short
        summary = None
    explanation = summary.get("explanation", NO_SUMMARY) if isinstance(summary, dict) else NO_SUMMARY

    def link(name):  # relative to the page, which lies in root; None where the run has no such file
        path = run / name
        return f"{quote(row['job'])}/{quote(name)}{'/' if path.is_dir() else ''}" if path.exists() else None
    return {"framework": row.get("framework", "fastai"), "scenario": row["scenario"], "fix": row["fix"],
            "job": row["job"], "verdict": row["verdict"],
            "explanation": explanation, "wall_s": row["wall_s"], "skew_s": row["skew_s"], "repeat": row["repeat"],
            "summary": link("summary.json"), "logs": link("logs"), "timeline": link("timeline.png")}


def page_data(cells: list, runs: list, references: dict) -> dict:
    """What the page draws: one grid per framework (a selector picks one when there are several), each
    cell with its label's lines and its runs, each scenario with the reports it reproduces in that framework."""
    grids = []
    for framework in frameworks(cells):
        mine = [c for c in cells if c.get("framework", "fastai") == framework]
        scenarios = scenarios_shown(mine)
        grids.append({"framework": framework, "title": title(mine), "scenarios": scenarios,
                      "fixes": fixes_shown(mine), "references": {s: cited(references, s, framework) for s in scenarios},
                      "cells": [{**c, "label": label(c).split("\n"),
                                 "runs": [r for r in runs if (r.get("framework", "fastai"), r["scenario"], r["fix"]) ==
                                          (framework, c["scenario"], c["fix"])]} for c in mine]})
    return {"title": title(cells), "explained": EXPLAINED.replace("`", ""), "colours": COLOURS, "grids": grids}


def script_json(data) -> str:
    """JSON that cannot end its <script> element or open a comment: <, > and & as \\u escapes."""
    return (json.dumps(data, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026"))


def page(name: str, cells: list, runs: list, references: dict) -> str:
    fill = {"name": html.escape(name), "frameworks": html.escape(named(frameworks(cells))),
            "data": script_json(page_data(cells, runs, references))}
    return re.sub(r"\{\{(name|frameworks|data)\}\}", lambda m: fill[m[1]], PAGE)  # one pass: fills stay as is


def write_html(root: Path, cells: list, rows: list, references: dict):
    runs = [run_entry(root, row) for row in rows if row["job"]]  # a job left out as n/a has no run to list
    tmp = root / "matrix.html.tmp"
    tmp.write_text(page(root.name, cells, runs, references), encoding="utf-8")
    tmp.replace(root / "matrix.html")


PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Scenario x fix: {{frameworks}} ({{name}})</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
  table.grid { border-collapse: separate; border-spacing: 3px; }
  table.grid th { font-weight: 600; padding: 0.3em 0.6em; }
  table.grid th.scenario { text-align: right; }
  table.grid th small { display: block; font-weight: normal; color: #666; }
  button.cell { width: 100%; min-width: 11em; min-height: 4.5em; border: 2px solid transparent; border-radius: 3px;
                font: inherit; font-size: 13px; cursor: pointer; }
  button.cell span { display: block; }
  button.cell span:first-child { font-weight: 600; }
  button.cell[aria-pressed="true"] { border-color: #222; }
  #runs ol { padding-left: 1.2em; }
  #runs li { margin: 1em 0 2em; }
  #runs .job { font-family: monospace; }
  #runs img { display: block; max-width: min(100%, 70em); margin-top: 0.5em; border: 1px solid #ddd; }
  #runs .links a { margin-right: 1em; }
  .explained { color: #555; max-width: 60em; }
</style>
</head>
<body>
<h1>Scenario x fix: {{frameworks}} ({{name}})</h1>
<p id="title"></p>
<noscript>This page draws the matrix with JavaScript; matrix.md and matrix.csv beside it hold the same table.</noscript>
<p id="frameworks" hidden><label for="framework">framework </label><select id="framework"></select></p>
<div id="matrix"></div>
<p class="explained" id="explained"></p>
<section id="runs"><p>Click a cell to list its runs.</p></section>
<script type="application/json" id="data">{{data}}</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("data").textContent);
let grid = data.grids[0];  // one grid per framework; the selector shows when there are several

// an element with attributes and children; strings become text nodes, never markup
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  e.append(...children);
  return e;
}

function drawGrid() {
  const byPair = new Map(grid.cells.map(c => [c.scenario + "\\u0000" + c.fix, c]));
  const head = el("tr", {}, el("th"), ...grid.fixes.map(f => el("th", {scope: "col"}, f)));
  const rows = grid.scenarios.map(s => {
    const ref = grid.references[s];
    const th = el("th", {scope: "row", class: "scenario"}, s, ...(ref ? [el("small", {}, ref)] : []));
    return el("tr", {}, th, ...grid.fixes.map(f => {
      const c = byPair.get(s + "\\u0000" + f);
      if (!c) return el("td");
      const button = el("button", {class: "cell", type: "button", "aria-pressed": "false",
                                   "data-scenario": s, "data-fix": f, "data-verdict": c.verdict},
                        ...c.label.map(line => el("span", {}, line)));
      button.style.background = data.colours[c.verdict] || "#ffffff";
      button.addEventListener("click", () => showRuns(c, button));
      return el("td", {}, button);
    }));
  });
  document.getElementById("matrix").replaceChildren(el("table", {class: "grid", "data-framework": grid.framework},
                                                         el("thead", {}, head), el("tbody", {}, ...rows)));
}

function runItem(r) {
  const took = r.wall_s === "" ? "duration not recorded" : `took ${Number(r.wall_s).toFixed(1)} s`;
  const links = [["summary.json", r.summary], ["logs", r.logs]].filter(([, href]) => href)
    .map(([text, href]) => el("a", {href: href, class: text === "logs" ? "logs" : "summary"}, text));
  const item = el("li", {class: "run"},
    el("div", {}, el("span", {class: "job"}, r.job), ` (skew ${r.skew_s} s, repeat ${r.repeat})`),
    el("div", {}, el("strong", {class: "verdict"}, r.verdict), " \\u00b7 ", el("span", {class: "duration"}, took)),
    el("div", {class: "explanation"}, r.explanation),
    el("div", {class: "links"}, ...links));
  if (r.timeline) item.append(el("img", {src: r.timeline, class: "timeline", alt: `timeline of ${r.job}`}));
  return item;
}

function showRuns(c, button) {
  for (const b of document.querySelectorAll("button.cell")) b.setAttribute("aria-pressed", String(b === button));
  const section = document.getElementById("runs");
  const what = c.runs.length === 1 ? "1 run" : `${c.runs.length} runs`;
  const where = data.grids.length > 1 ? `${grid.framework}: ` : "";
  section.replaceChildren(el("h2", {}, `${where}${c.scenario} x ${c.fix}: ${what}`),
                          el("p", {class: "label"}, c.label.join("; ")),
                          ...(c.note ? [el("p", {class: "note"}, c.note)] : []),
                          el("ol", {}, ...c.runs.map(runItem)));
}

function pickFramework(name) {
  grid = data.grids.find(g => g.framework === name);
  document.getElementById("title").textContent = grid.title;
  drawGrid();
  document.getElementById("runs").replaceChildren(el("p", {}, "Click a cell to list its runs."));
}

document.getElementById("title").textContent = grid.title;
document.getElementById("explained").textContent = data.explained;
if (data.grids.length > 1) {
  const select = document.getElementById("framework");
  select.append(...data.grids.map(g => el("option", {value: g.framework}, g.framework)));
  select.addEventListener("change", () => pickFramework(select.value));
  document.getElementById("frameworks").hidden = false;
}
drawGrid();
</script>
</body>
</html>
"""
