"""A checkpoint folder listed as a stale directory cache lists it (an NFS client's, after a restart): os.listdir and
os.scandir of that one folder miss its newest entry (the latest modification), while the context lasts. For code
that is not race-lab's (a class of yours): no seam of its own lists the folder, so the two public functions are
wrapped, for the folder alone, and each stale answer is recorded (stale_listing{hidden})."""
import os
from contextlib import contextmanager


class Listing:
    """os.scandir's answer, filtered: iterable, and a context manager as scandir's is."""

    def __init__(self, entries):
        self.entries = entries

    def __iter__(self):
        return iter(self.entries)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def close(self):
        pass


@contextmanager
def stale_listing(folder, events):
    """While it lasts, `folder` is listed without its newest entry; events records each listing it changed."""
    real_listdir, real_scandir, folder = os.listdir, os.scandir, os.path.abspath(folder)

    def hidden(names_and_times):
        if not names_and_times:
            return set()
        newest = max(t for _, t in names_and_times)
        gone = {n for n, t in names_and_times if t == newest}
        events.record("stale_listing", hidden=",".join(sorted(gone)))
        return gone

    def is_folder(path):
        return path is not None and not isinstance(path, int) and os.path.abspath(os.fsdecode(path)) == folder

    def listdir(path=None):
        names = real_listdir(path) if path is not None else real_listdir()
        if not is_folder(path):
            return names
        gone = hidden([(n, os.stat(os.path.join(folder, n)).st_mtime_ns) for n in names])
        return [n for n in names if n not in gone]

    def scandir(path=None):
        if not is_folder(path):
            return real_scandir(path) if path is not None else real_scandir()
        with real_scandir(path) as it:
            entries = list(it)
        gone = hidden([(e.name, e.stat().st_mtime_ns) for e in entries])
        return Listing([e for e in entries if e.name not in gone])

    os.listdir, os.scandir = listdir, scandir
    try:
        yield
    finally:
        os.listdir, os.scandir = real_listdir, real_scandir
