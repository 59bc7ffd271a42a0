"""Each rank's entry point. It lives apart from the launcher so that a rank the forkserver forks,
which unpickles this function by name, imports only this small module (the preload has it already),
not train.launch with Hydra; and the launcher, which names it, never imports fastai."""
from torch.distributed.elastic.multiprocessing.errors import record

from train.early import end_with_parent


@record
def rank_main(cfg: dict, plan: dict, run_dir: str) -> dict:
    """One rank, from torch elastic's start to its return value (a top-level function, so spawn can import it)."""
    end_with_parent()
    from train.worker import run_rank

    return run_rank(cfg, plan, run_dir)
