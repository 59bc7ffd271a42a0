"""One rank: its entry point (entry.py, small, what a forked rank unpickles), the worker that joins the group and
hands over to the framework's adapter (worker.py), and what the forkserver imports before it forks (preload.py)."""
