"""A sweep's matrix written out: matrix.csv, matrix.md, matrix.png and matrix.html."""
import csv
from pathlib import Path

import yaml

from train.report.matrix import (
    EXPLAINED,
    FIELDS,
    build,
    frameworks,
    markdown,
    named,
    plot,
)


def scenario_references(configs: Path) -> dict:
    """scenario -> framework (or all) -> the public reports it reproduces there, from each scenario file's
    `reproduces` key (train/config.py); a file without one cites none."""
    refs = {}
    for f in sorted(configs.glob("scenario/*.yaml")):
        refs[f.stem] = (yaml.safe_load(f.read_text()) or {}).get("reproduces") or {}
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
        f"# Scenario x fix: {named(frameworks(cells))} ({root.name})\n\n{table}\n\n{EXPLAINED}\n\n![matrix](matrix.png)\n", encoding="utf-8")
    plot(cells, root / "matrix.png")
    write_html(root, cells, rows, references)
    return table
