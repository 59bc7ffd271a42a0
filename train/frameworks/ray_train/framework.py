"""Ray Train's contract (train/frameworks/base.py): a TorchTrainer whose CPU workers (gloo) train DDP, each
uploading its part of every epoch's checkpoint with ray.train.report, and resume after Ray restarts them
(FailureConfig), from Ray's own record (ray.train.get_checkpoint) or from the newest folder on storage."""

from train.frameworks.base import Framework


class RayTrain(Framework):
    name = "ray_train"
    distribution = "ray"
    workloads = {"resume": "train.frameworks.ray_train.driver:fit_and_resume"}
    own_workers = True  # TorchTrainer starts its own workers: race-lab runs its driver (driver.py)
    as_shipped_fix = "as_shipped"  # Ray's own resume: ray.train.get_checkpoint()
    fixes = {"resume": frozenset({"as_shipped", "in_place", "rank0_leads"})}
    no_fix = {
        "atomic": "each worker's part reaches the folder through Ray's upload (pyarrow's copy), not a write of yours "
        "to make atomic; the helper that holds is fix=rank0_leads",
        "agreed": "what rank 0 decides and sends is all of fix=rank0_leads (the newest folder every part and its "
        "marker reached)",
        "manifest": "the marker written last is part of fix=rank0_leads",
        "dcp": "torch.distributed.checkpoint would replace ray.train.report's upload, not plug into it",
    }
    provides = frozenset({"sharded_state"})  # every worker uploads its own part (rank_<r>.pt) into one folder
    lacks = {
        "load_best": "Ray Train keeps the checkpoints ray.train.report gives it and resumes; race-lab runs no load of "
        "the best at the end for it (its scenario: shard_lost, a worker killed inside its upload)",
        "pointer": "Ray Train writes no `latest` pointer: its controller records each checkpoint once every worker "
        "reported (checkpoint_manager_snapshot.json)",
        "listing": "Ray's resume lists no folder (the controller hands ray.train.get_checkpoint() its record); the "
        "newest-folder resume lists it on every worker, with no stale cache placed there",
        "older_run": "Ray's record of checkpoints is its own run's; an older run's folder is found only by the "
        "newest-folder resume, with no planted run (fault.older_run is DeepSpeed's)",
        "dcp_async_save": "ray.train.report uploads synchronously here; it has no dcp async save to run",
        "async_top_k": "ray.train.report uploads synchronously here; num_to_keep is Ray's controller's, after every "
        "worker reported",
    }
