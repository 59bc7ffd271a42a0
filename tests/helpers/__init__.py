"""What several test files share (tests/ is on sys.path: conftest.py's folder)."""
