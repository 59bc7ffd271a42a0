"""DeepSpeed's contract (train/frameworks/base.py): ZeRO's save_checkpoint every epoch and load_checkpoint, which
reads `latest`, at the start of every attempt (resume.py), on gloo ranks through its CPU accelerator; or a class of
yours around them (own.py), rank0_leads.py's among them."""

from train.frameworks.base import FOLDER, Framework, OwnBase

ASYNC = "save_checkpoint saves synchronously here; it has no async save to run"


class DeepSpeed(Framework):
    name = "deepspeed"
    distribution = "deepspeed"
    workloads = {"resume": "train.frameworks.deepspeed.resume:fit_and_resume"}
    preload = ("train.frameworks.deepspeed.accelerator",)  # DS_ACCELERATOR, before deepspeed is imported
    as_shipped_fix = "as_shipped"
    fixes = {
        "resume": frozenset({"as_shipped", "atomic", "agreed", "manifest", "node_local_storage", "rank0_leads", "own"})
    }
    # fix=own: DeepSpeed's engine is not yours, the code around save_checkpoint and load_checkpoint is: a class with
    # the methods of the file users copy (rank0_leads.py's Rank0LeadsCheckpoints), built with the checkpoint folder
    # and fix.kwargs; save(engine, epoch) on every rank after each epoch, resume(engine) on every rank at each
    # attempt's start, returning the client state it loaded or None (own.py)
    own_bases = (
        OwnBase(
            None,
            positional=("folder",),
            built_with={"folder": FOLDER},
            methods={"save": ("engine", "epoch"), "resume": ("engine",)},
        ),
    )
    no_fix = {
        "in_place": "the naive resume loop of framework=torch_loop; this framework's own resume as shipped is "
        "fix=as_shipped",
        "barrier": "save_checkpoint ends in a barrier already (after `latest`); the tag written after one is "
        "fix=atomic",
        "wait_for_everyone": "accelerate's barrier; save_checkpoint ends in a barrier already",
        "dcp": "torch.distributed.checkpoint would replace save_checkpoint and load_checkpoint, not plug into them",
        "save_on_each_node": "the Trainer's save_on_each_node; DeepSpeed's counterpart, "
        "checkpoint.use_node_local_storage, is fix=node_local_storage",
        "rank0_rotates": "nothing rotates: DeepSpeed keeps every global_step<N> folder (scenario=cleanup runs, and "
        "nothing is deleted: its race cannot happen)",
    }
    provides = frozenset({"sharded_state", "older_run"})
    lacks = {
        "load_best": "DeepSpeed documents no best checkpoint to keep and reload; it resumes only (its scenarios: "
        "crash_mid_save, shard_lost, node_local_resume, stale_tag)",
        "pointer": "DeepSpeed writes `latest` after rank 0's own files; what it writes the tag before is the other "
        "ranks' shards: shard_lost",
        "listing": "load_checkpoint reads `latest`, it lists no folder: a stale listing has no seam to act on (the "
        "ranks' disagreement on node-local disks is node_local_resume)",
        "dcp_async_save": ASYNC,
        "async_top_k": ASYNC,
    }
