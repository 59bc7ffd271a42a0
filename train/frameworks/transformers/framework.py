"""The Trainer's contract (train/frameworks/base.py): TrainingArguments(load_best_model_at_end=True)
(load_best.py); train(resume_from_checkpoint=...) at the start of every attempt (resume.py)."""

from train.frameworks.base import Framework, OwnBase

ASYNC = "the Trainer saves synchronously; it has no async save to run here"


class Transformers(Framework):
    name = "transformers"
    distribution = "transformers"
    workloads = {
        "load_best": "train.frameworks.transformers.load_best:fit_and_load",
        "resume": "train.frameworks.transformers.resume:fit_and_resume",
    }
    as_shipped_fix = "as_shipped"
    fixes = {
        "load_best": frozenset({"as_shipped", "save_on_each_node", "broadcast", "agreed", "own", "rank0_leads"}),
        "resume": frozenset({"as_shipped", "atomic", "manifest", "agreed", "rank0_leads", "own"}),
    }
    no_fix = {
        "unsynced": "fastai v1's load without a barrier; the Trainer always passes its dist.barrier() after each save",
        "barrier": "the Trainer's own barrier after each save is fix=as_shipped",
        "wait_for_everyone": "accelerate's barrier between save_state and load_state; the Trainer's own barrier "
        "after each save is fix=as_shipped",
        "poll": "the Trainer reads only after its barrier, so waiting for the file first adds nothing",
        "load_best/atomic": "the Trainer reads only after the barrier that follows the save, so no rank can see a "
        "half-written file",
        "dcp": "torch.distributed.checkpoint would replace the Trainer's save and load, not plug into them",
        "rank0_rotates": "already as shipped: the Trainer's rotation (save_total_limit) runs on args.should_save "
        "alone (process 0), with shutil.rmtree(ignore_errors=True)",
        "in_place": "the naive resume loop of framework=torch_loop; this framework's own resume as shipped is "
        "fix=as_shipped",
    }
    provides = frozenset({"listing"})
    lacks = {
        "load_guard": "checkpoint.guard is a check in race-lab's fastai callback; the Trainer's own exists() "
        "(#40923) comes after its barrier and _load_best_model only warns on a missing file "
        "(scenario=no_shared_fs shows it): no public seam puts a guard before them",
        "rank_read_at_save": "the Trainer takes each rank from the process group when it starts (accelerate's "
        "PartialState), not from RANK at save time, so a misdetected rank cannot be placed",
        "pointer": "the Trainer keeps no pointer: get_last_checkpoint takes the checkpoint-<step> folder with the "
        "highest step (its torn newest is crash_mid_save)",
        "sharded_state": "the Trainer's DDP checkpoint is written by rank 0",
        "older_run": "no older run is planted for it (fault.older_run is written for DeepSpeed's save_checkpoint)",
        "dcp_async_save": ASYNC,
        "async_top_k": ASYNC,
    }
    own_bases = (
        OwnBase("transformers.Trainer", keywords=("model", "args", "train_dataset", "eval_dataset", "compute_metrics")),
        OwnBase("transformers.TrainerCallback"),
    )
