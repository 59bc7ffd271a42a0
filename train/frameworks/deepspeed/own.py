"""fix=own for DeepSpeed's resume: a class of yours in place of the loop's save_checkpoint and load_checkpoint, with
the interface of docs/fixes/deepspeed.md's Rank0LeadsCheckpoints (the contract's own_bases, framework.py): built
with the checkpoint folder and fix.kwargs; save(engine, epoch) on every rank after each epoch; resume(engine) on
every rank at each attempt's start, returning the client state it loaded (a dict with "epoch") or None: a fresh
start. fix=rank0_leads is that file's class, run the same way.

Your class cooperates with nothing: the scenario's faults sit in the engine's checkpoint engine (seams.py), which
every file engine.save_checkpoint writes and engine.load_checkpoint reads goes through, whoever calls them; and the
loop records what went through it: save_end names the tag folder your save wrote (rank 0), the resume the tag
folder of the model file this rank's load read (none: a fresh start) and the epoch your resume returned, a resume
that raised a load_error naming the file it failed on (the error's, else the last one it read).
fault.older_run (stale_tag): the older run saves through a class of yours built where TORCHELASTIC_RUN_ID (torch
elastic's run id, the rendezvous id) is that run's, as another launch's would be.
"""
import os
from contextlib import contextmanager
from pathlib import Path

from train.frameworks.deepspeed.seams import MODEL
from train.toolkit.errors import error_fields
from train.toolkit.rank import named_class, say

COPIED_FILE = "train.frameworks.deepspeed.rank0_leads.Rank0LeadsCheckpoints"  # fix=rank0_leads: the file users copy


def class_of(fix: dict):
    return named_class(COPIED_FILE if fix["name"] == "rank0_leads" else fix["_target_"])


@contextmanager
def run_id(value: str):
    """TORCHELASTIC_RUN_ID set to `value` while a class of yours is built (an older run's)."""
    before = os.environ.get("TORCHELASTIC_RUN_ID")
    os.environ["TORCHELASTIC_RUN_ID"] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ["TORCHELASTIC_RUN_ID"]
        else:
            os.environ["TORCHELASTIC_RUN_ID"] = before


class OwnCheckpoints:
    """The loop's save and resume, done by a class of yours; what its engine wrote and read, from the seam."""

    def __init__(self, loop):
        self.loop, fix = loop, loop.cfg["fix"]
        self.cls, self.kwargs = class_of(fix), fix["kwargs"]
        self.user = self.cls(str(loop.folder), **self.kwargs)

    def save_older(self, engine, run: str):
        """The older run's save (fault.older_run), by a class of yours of that run."""
        with run_id(run):
            older = self.cls(str(self.loop.folder), **self.kwargs)
        older.save(engine, 0)

    def save(self, epoch: int):
        """Your save, on every rank: the tag folder it wrote (its model file's, or any file's), or None."""
        seam = self.loop.seam
        seam.wrote = []
        self.user.save(self.loop.engine, epoch)
        models = [p for p in seam.wrote if MODEL.match(Path(p).name)] or seam.wrote
        return Path(models[-1]).parent if models else None

    def resume(self):
        """Your resume, on every rank: (the epoch it resumed, the tag folder of the model file it read) or
        (None, None): a fresh start. A resume that raised is recorded (load_error) and raised."""
        seam = self.loop.seam
        seam.read = []
        try:
            client = self.user.resume(self.loop.engine)
            if client is not None and not (isinstance(client, dict) and isinstance(client.get("epoch"), int)):
                raise TypeError(f"resume() returned {type(client).__name__}, not the client state saved (a dict "
                                "with its 'epoch') or None")
        except Exception as e:
            named = getattr(e, "filename", None) or (seam.read[-1] if seam.read else None)  # the file it failed on
            self.loop.events.record("load_error", path=str(named) if named else None, **error_fields(e))
            say(f"Resume failed in your class: {type(e).__name__}: {e}")
            raise
        if client is None:
            return None, None
        models = [p for p in seam.read if MODEL.match(Path(p).name)]
        return client["epoch"], (Path(models[-1]).parent if models else None)
