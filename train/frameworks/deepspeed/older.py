"""fault.older_run (scenario=stale_tag): a tag an older run left in the folder. Before the first attempt's resume,
every rank runs an earlier run of the same loop with another seed: deepspeed.initialize, one epoch, and
save_checkpoint(dir) as the run's fix saves (as shipped: DeepSpeed's own `latest`; atomic: the tag written last;
manifest: the manifest too, naming that run, not this one; a class of yours: its save, own.py). Its saves go through DeepSpeed's own checkpoint engine,
so they record no event: this run's records hold no save of it, as a real older run's folder would not."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from train.toolkit.rank import say


def plant_older_run(loop, seed: int):
    """Train one epoch of a run seeded `seed` on every rank and leave its checkpoint (global_step<N>, client epoch
    0) and tag in loop.folder; then a barrier, so that no rank resumes before the tag is there."""
    engine, loader, sampler = loop.engine_and_data(seed)
    sampler.set_epoch(0)
    engine.train()
    for x, y in loader:
        engine.backward(F.cross_entropy(engine(x), y))
        engine.step()
    tag, run = f"global_step{engine.global_steps}", f"older-{seed}"
    if loop.own:  # a class of yours saves as it does, built where that run's id is TORCHELASTIC_RUN_ID (own.py)
        loop.own.save_older(engine, run)
    else:
        engine.save_checkpoint(str(loop.folder), tag=tag, client_state={"epoch": 0}, save_latest=not loop.way.tag_last)
        loop.publish(tag, run, step=engine.global_steps)
    dist.barrier()
    say(f"An older run (seed {seed}) left {tag} and its tag in {loop.folder} (fault.older_run).")
    del engine
    torch.manual_seed(loop.cfg["seed"])
