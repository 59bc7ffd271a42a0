"""Reporting: runs -> report.csv, report.md and figures (runs.py, timeline.py, race_vs_skew.py), the matrix
(matrix.py, matrix_files.py, matrix_html.py), rates with their intervals (rates.py), the console table
(console.py), several nodes' records merged (node_records.py). `python -m train.report`: cli.py."""
