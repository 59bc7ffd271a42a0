"""check.html: the card as a page that reads without JavaScript: the answer, a row per scenario with its whole
sentence and the fixes that hold it, what was left out and why, and a link to the runs' grid (matrix.html, which
its scripts draw). Everything a run wrote is escaped."""
from html import escape

from train.report.check_card import last_line, row_result, what_was_checked

STYLE = """body{font:14px/1.45 system-ui,sans-serif;margin:1.5em;max-width:80em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .5em;vertical-align:top;text-align:left}
.held{background:#e6f4ea}.raced{background:#fde7e7}.not_checked{background:#f0f0f0}"""


def page(result_: dict, grid: str = "matrix.html") -> str:
    """check.html's text; grid: the runs' grid beside it, '' for none."""
    rows = "\n".join(
        f'<tr class="{escape(r["verdict"])}"><td>{escape(r["name"])}</td><td>{escape(r["workload"])}</td>'
        f"<td>{escape(row_result(r))}</td><td>{escape(r['explanation'])}</td>"
        f"<td>{escape(', '.join(r['holds_with']))}</td></tr>" for r in result_["scenarios"])
    left = "".join(f"<li>{escape(left['name'])}: {escape(left['why'])}</li>" for left in result_["left_out"])
    left_out = f"<h2>Left out</h2><ul>{left}</ul>" if left else ""
    runs = f'<p><a href="{escape(grid)}">The runs, to click through</a> (drawn by its scripts)</p>' if grid else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>race-lab check: {escape(what_was_checked(result_))}</title>
<style>{STYLE}</style></head>
<body>
<h1>race-lab check: {escape(what_was_checked(result_))}</h1>
<p id="answer"><strong>{escape(last_line(result_))}</strong></p>
<p>{result_['repeats']} run(s) of each scenario, {result_['world_size']} ranks</p>
<table id="scenarios"><thead><tr><th>scenario</th><th>workload</th><th>result</th><th>what happened</th>
<th>holds with</th></tr></thead>
<tbody>
{rows}
</tbody></table>
{left_out}
{runs}
</body></html>
"""
