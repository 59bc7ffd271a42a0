"""The plain torch loop's contract (train/frameworks/base.py): a DDP loop that saves every epoch and resumes from
the newest at every attempt (resume.py), with dcp.async_save where a scenario saves async (async_save.py)."""

from train.frameworks.base import FOLDER, Framework, OwnBase


class TorchLoop(Framework):
    name = "torch_loop"
    distribution = "torch"
    workloads = {"resume": "train.frameworks.torch_loop.resume:fit_and_resume"}
    as_shipped_fix = "in_place"  # the loop as people write it
    fixes = {
        "resume": frozenset(
            {
                "in_place",
                "atomic",
                "dcp",
                "manifest",
                "agreed",
                "rank0_rotates",
                "rank0_leads",
                "on_durable",
                "own_group",
                "fresh_rename",
                "durable",
                "own",
            }
        )
    }
    # fix=own: a plain loop has no base class; a class of yours is what loop writers write (docs/fixes/torch_loop.md's
    # Rank0Checkpoints): built with the checkpoint folder and fix.kwargs, save(epoch, state) on every rank after
    # each epoch, resume() on every rank at each attempt's start, returning the state saved or None, and close(), if
    # it has one, on every rank once training ends (own.py); where a scenario saves async, its dcp.async_save and
    # dcp.load are where the faults sit (own_async.py; docs/fixes/torch_loop-durable.md's file is one such class)
    own_bases = (
        OwnBase(
            None,
            positional=("folder",),
            built_with={"folder": FOLDER},
            methods={"save": ("epoch", "state"), "resume": ()},
        ),
    )
    files_to_copy = frozenset({"durable"})  # durable.py: every async fix at once, as a class of yours
    no_fix = {"as_shipped": "there is no framework to ship one: the loop as written is fix=in_place"}
    provides = frozenset({"pointer", "listing", "dcp_async_save"})
    lacks = {
        "load_best": "the loop resumes only; it has no load of the best at the end (its scenarios: crash_mid_save, "
        "pointer_first, cleanup, resume_disagree)",
        "sharded_state": "the loop's checkpoint is one file, rank 0's (pointer_first)",
        "older_run": "the loop's own `latest` pointer (checkpoint.pointer) has no older run planted for it "
        "(fault.older_run is DeepSpeed's)",
        "async_top_k": "Lightning's ModelCheckpoint retention under AsyncCheckpointIO; the torch loop's cleanup "
        "before an async save is durable is async_in_flight",
    }
