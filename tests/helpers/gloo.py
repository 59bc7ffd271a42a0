"""Real gloo process groups inside a test, for the fixes whose collectives are the point (train/fixes.py) and the
adapters' code around them: one rank in the test's own process (`one_rank`), or two (`on_two_ranks`), rank 0 in the
test's process and rank 1 in a child forked from it. The test's process runs a rank itself so that coverage and
mutmut's trampolines see the code it runs (make mutants); the forked child inherits the mutant under test."""
import multiprocessing
import os
import traceback
from contextlib import contextmanager
from datetime import timedelta

import torch.distributed as dist

TIMEOUT_S = 20  # a collective a peer never comes to fails within this, never hangs the suite


@contextmanager
def one_rank(tmp_path):
    """A gloo process group of one rank (this process) for the body of the `with`, destroyed after it."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store-1'}", rank=0, world_size=1,
                            timeout=timedelta(seconds=TIMEOUT_S))
    try:
        yield
    finally:
        dist.destroy_process_group()


def _child(body, store, conn):
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=1, world_size=2,
                                timeout=timedelta(seconds=TIMEOUT_S))
        conn.send(("ok", body(1)))
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 (whatever it was, rank 0's test says it)
        conn.send(("raised", traceback.format_exc()))
    finally:
        os._exit(0)  # not pytest's exit handlers: this is a fork of the test's process


def on_two_ranks(tmp_path, body) -> list:
    """[body(0), body(1)]: body(rank) run on two real gloo ranks at once, rank 0 here, rank 1 in a forked child.
    What rank 1 raised is raised here as an AssertionError with its traceback."""
    tmp_path.mkdir(parents=True, exist_ok=True)  # a FileStore in a folder that is not there waits out 300 s
    store = tmp_path / "store-2"
    ours, theirs = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_child, args=(body, store, theirs), daemon=True)
    child.start()
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=2,
                                timeout=timedelta(seconds=TIMEOUT_S))
        try:
            mine = body(0)
        finally:
            dist.destroy_process_group()
        if not ours.poll(TIMEOUT_S * 2):
            raise AssertionError("rank 1 sent nothing back")
        how, theirs_got = ours.recv()
        assert how == "ok", f"rank 1 raised:\n{theirs_got}"
        return [mine, theirs_got]
    finally:
        child.join(TIMEOUT_S)
        if child.is_alive():
            child.kill()
            child.join()
