"""Judging: pure functions over event records. The vocabulary (vocabulary.py), the load-best verdict
(load_best.py) and its sentence (explain.py), the resume verdict (resume.py). Imports nothing of the harness."""
