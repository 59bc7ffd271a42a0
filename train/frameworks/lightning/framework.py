"""Lightning's contract (train/frameworks/base.py): ModelCheckpoint(save_top_k=1) and validate(ckpt_path="best")
(load_best.py); fit(ckpt_path="last") at the start of every attempt (resume.py); AsyncCheckpointIO around it where a
scenario saves async (async_save.py). Both workloads run a class of yours under either Lightning package
(lightning_package.py)."""

from train.frameworks.base import FOLDER, Framework, FromConfig, OwnBase

# what the adapter gives a ModelCheckpoint of yours (load_best.py)
CHECKPOINT_ARGUMENTS = {
    "dirpath": FOLDER,
    "filename": FromConfig("checkpoint.name"),
    "monitor": "val_acc",
    "mode": "max",
    "save_top_k": 1,
}
# what the resume gives it instead (resume.py; with checkpoint.keep_last, monitor="step", mode="max" too)
RESUME_CHECKPOINT_ARGUMENTS = {
    "dirpath": FOLDER,
    "every_n_epochs": 1,
    "save_on_train_epoch_end": True,
    "save_last": True,
    "save_top_k": -1,
}


class Lightning(Framework):
    name = "lightning"
    distribution = "pytorch-lightning"
    workloads = {
        "load_best": "train.frameworks.lightning.lightning_package:fit_and_load",
        "resume": "train.frameworks.lightning.lightning_package:fit_and_resume",
    }
    as_shipped_fix = "as_shipped"
    fixes = {
        "load_best": frozenset({"as_shipped", "broadcast", "agreed", "own", "rank0_leads"}),
        "resume": frozenset({"as_shipped", "agreed", "own", "rank0_leads", "on_durable"}),
    }
    no_fix = {
        "unsynced": "fastai v1's load with no sync; Lightning's save always ends in Trainer.save_checkpoint's "
        "barrier, with no public seam to take it out",
        "wait_for_everyone": "accelerate's barrier between save_state and load_state; Lightning's save ends in "
        "Trainer.save_checkpoint's barrier already (fix=as_shipped)",
        "barrier": "fastai's Learner.load barrier; Lightning as shipped (fix=as_shipped) has its barrier already, "
        "after the save",
        "poll": "waiting for the file only helps a load with no barrier before it; Lightning's save ends in a barrier",
        "atomic": "Lightning already writes atomically (TorchCheckpointIO's fsspec transaction, Lightning#20011): "
        "fix=as_shipped",
        "dcp": "DDPStrategy saves through a CheckpointIO on rank 0 alone; torch.distributed.checkpoint is "
        "Lightning's only in FSDP and ModelParallelStrategy",
        "save_on_each_node": "Lightning has no documented equivalent (DDPStrategy.save_checkpoint writes on global "
        "rank 0 only; Lightning#8599)",
        "in_place": "the naive resume loop of framework=torch_loop; this framework's own resume as shipped is "
        "fix=as_shipped",
        "manifest": "already as shipped: each checkpoint reaches its name only whole (an fsspec transaction's move "
        "at commit, Lightning#20011), and save_last='link' makes last.ckpt after the file it names",
        "rank0_rotates": "already as shipped: ModelCheckpoint deletes old checkpoints through "
        "DDPStrategy.remove_checkpoint, on global rank 0 only",
        "own_group": "a group of its own for dcp.async_save's collectives; Lightning's AsyncCheckpointIO writes on "
        "global rank 0 alone, with no collective",
        "fresh_rename": "a fix of a dcp save over a folder; Lightning saves each checkpoint as a file of its own, "
        "whole through an fsspec transaction",
        "durable": "the torch loop's dcp.async_save fixes at once; Lightning's AsyncCheckpointIO fix is fix=on_durable",
    }
    provides = frozenset({"load_guard", "pointer", "listing", "async_top_k"})
    lacks = {
        "rank_read_at_save": "Lightning reads RANK and WORLD_SIZE from torch elastic's environment at every call "
        "(TorchElasticEnvironment), so a rank misdetected mid-run fails its next collective "
        "(KeyError 'WORLD_SIZE') instead of writing as rank 0",
        "sharded_state": "Lightning's DDP checkpoint is one file, written by rank 0",
        "older_run": "no older run is planted for it (fault.older_run is written for DeepSpeed's save_checkpoint)",
        "dcp_async_save": "the torch loop's dcp.async_save; Lightning's AsyncCheckpointIO with save_top_k is "
        "scenario=async_top_k",
    }
    own_bases = tuple(
        OwnBase(f"{package}.{base}", keywords=tuple(given), built_with=given, keywords_in=resumed)
        for package in ("pytorch_lightning", "lightning.pytorch")
        for base, given, resumed in (
            ("plugins.TorchCheckpointIO", {}, {}),
            ("callbacks.ModelCheckpoint", CHECKPOINT_ARGUMENTS, {"resume": RESUME_CHECKPOINT_ARGUMENTS}),
        )
    )
