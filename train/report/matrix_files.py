"""A sweep's matrix written out: matrix.csv, matrix.md, matrix.png and matrix.html."""
import csv
from pathlib import Path

from train.report.matrix import EXPLAINED, FIELDS, build, markdown, plot


def scenario_references(configs: Path) -> dict:
    """Each scenario file's public report(s), from its opening comment (the lines after `# @package _global_`,
    up to the first that is not a comment): 'repo#number' mentions."""
    import itertools
    import re

    refs = {}
    for f in sorted(configs.glob("scenario/*.yaml")):
        opening = itertools.takewhile(lambda line: line.startswith("#"), f.read_text().splitlines()[1:])
        comment = " ".join(line.lstrip("# ") for line in opening)
        found = re.findall(r"[\w.-]+#\d+", comment)
        refs[f.stem] = ", ".join(dict.fromkeys(found))
    return refs


def write_matrix(root: Path, rows: list, configs: Path) -> str:
    """matrix.csv, matrix.md, matrix.png and matrix.html (train/report/matrix_html.py) into root; returns the table."""
    from train.report.matrix_html import write_html

    cells = build(rows)
    with open(root / "matrix.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(cells)
    references = scenario_references(configs)
    table = markdown(cells, references)
    (root / "matrix.md").write_text(
        f"# Scenario x fix: {root.name}\n\n{table}\n\n{EXPLAINED}\n\n![matrix](matrix.png)\n", encoding="utf-8")
    plot(cells, root / "matrix.png")
    write_html(root, cells, rows, references)
    return table
