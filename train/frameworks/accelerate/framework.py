"""Accelerate's contract (train/frameworks/base.py): the loop calls save_state of the best and load_state at the
end (load_best.py); load_state at the start of every attempt (resume.py). A class of yours (fix=own) is a checkpoint
helper with Rank0Leads's methods (rank0_leads.py, the file docs/fixes/accelerate.md has users copy): the loop calls
its save where it called save_state, its load_best(folder) at the end, its resume() at the start of an attempt."""

from train.frameworks.base import STAND_IN, Framework, OwnBase

ASYNC = "save_state saves synchronously; it has no async save to run here"


class Accelerate(Framework):
    name = "accelerate"
    distribution = "accelerate"
    workloads = {
        "load_best": "train.frameworks.accelerate.load_best:fit_and_load",
        "resume": "train.frameworks.accelerate.resume:fit_and_resume",
    }
    as_shipped_fix = "as_shipped"
    fixes = {
        "load_best": frozenset(
            {
                "as_shipped",
                "wait_for_everyone",
                "save_on_each_node",
                "agreed",
                "broadcast",
                "poll",
                "atomic",
                "rank0_leads",
                "own",
            }
        ),
        "resume": frozenset({"as_shipped", "atomic", "manifest", "agreed", "rank0_leads", "own"}),
    }
    no_fix = {
        "unsynced": "fastai v1's load with nothing before it; for accelerate that is fix=as_shipped",
        "barrier": "fastai's Learner.load barrier; accelerate's own barrier is fix=wait_for_everyone",
        "dcp": "torch.distributed.checkpoint is accelerate's FSDP path; save_state of a DDP model writes its own files",
        "in_place": "the naive resume loop of framework=torch_loop; this framework's own resume as shipped is "
        "fix=as_shipped",
        "rank0_rotates": "already as shipped: save_state's total_limit rotation deletes on the main process only "
        "(Accelerate#1982)",
    }
    provides = frozenset({"load_guard"})
    lacks = {
        "rank_read_at_save": "Accelerator reads its rank once, when it is created, so a rank misdetected at the last "
        "save changes nothing",
        "pointer": "Accelerate has no pointer: load_state() takes the highest checkpoint_<i> by its number (that case "
        "is crash_mid_save)",
        "listing": "load_state() lists the checkpoints folder itself (os.listdir inside it): no public seam gives one "
        "rank a stale listing",
        "sharded_state": "accelerate's DDP save_state writes no tag and no part of a rank's own",
        "older_run": "no older run is planted for it (fault.older_run is written for DeepSpeed's save_checkpoint)",
        "dcp_async_save": ASYNC,
        "async_top_k": ASYNC,
    }
    # fix=own: any class with Rank0Leads's methods (a copy of its file is another class object), built with the
    # Accelerator and the prepared model (stand-ins before any rank starts) and fix.kwargs
    own_bases = (
        OwnBase(
            "train.frameworks.accelerate.rank0_leads.Rank0Leads",
            positional=("accelerator", "model"),
            built_with={"accelerator": STAND_IN, "model": STAND_IN},
            methods={"save": ("output_dir",), "load_best": ("input_dir",), "resume": ()},
        ),
    )
