"""fastai's contract (train/frameworks/base.py): SaveModelCallback(every='improvement') saves the best on rank 0
and every rank loads it when fit ends (the seed); each fix is a SaveModelCallback subclass (callbacks.py)."""

from train.frameworks.base import STAND_IN, Framework, FromConfig, OwnBase

# the fixes that are a SaveModelCallback subclass of callbacks.py's, each named by its config's fix._target_
CALLBACKS = ("unsynced", "barrier", "poll", "atomic", "agreed", "broadcast", "dcp", "save_on_each_node", "rank0_leads")


class Fastai(Framework):
    name = "fastai"
    distribution = "fastai"
    workloads = {"load_best": "train.frameworks.fastai.load_best:fit_and_load"}
    as_shipped_fix = "barrier"  # fastai 2.8's Learner.load, with its distrib_barrier before the read
    fixes = {"load_best": frozenset({*CALLBACKS, "own"})}  # own: a SaveModelCallback subclass of yours
    no_fix = {
        "as_shipped": "fastai as shipped is fix=barrier (fastai 2.8's Learner.load with its distrib_barrier)",
        "wait_for_everyone": "accelerate's barrier between save_state and load_state; fastai's is fix=barrier",
    }
    provides = frozenset({"load_guard", "rank_read_at_save"})
    lacks = {
        "resume": "fastai's SaveModelCallback keeps the best and loads it at the end; fastai has no resume path here"
    }
    # fix=own: a RaceSaveModelCallback subclass, or a class with the methods of the callback users copy (rank0_leads.py,
    # on fastai's public SaveModelCallback; a copy of it is another class object), built with fix.kwargs and
    # monitor and fname (observed.py's callback_for)
    own_bases = (
        OwnBase(
            "train.frameworks.fastai.callbacks.RaceSaveModelCallback",
            positional=("events", "faults", "checkpoint"),
            keywords=("timeout_s",),
            built_with={
                "events": STAND_IN,
                "faults": STAND_IN,
                "checkpoint": FromConfig("checkpoint"),
                "timeout_s": FromConfig("timeout.collective_s"),
            },
        ),
        OwnBase(
            "train.frameworks.fastai.rank0_leads.Rank0LeadsSaveModelCallback",
            keywords=("monitor", "fname"),
            built_with={"monitor": "accuracy", "fname": FromConfig("checkpoint.name")},
            methods={
                "path_of": ("name",),
                "write_checkpoint": ("path", "data"),
                "write_bytes": ("f", "data"),
                "read_checkpoint": ("path",),
                "broadcast": ("obj",),
                "loaded": ("path",),
                "not_loaded": ("why",),
            },
        ),
    )
