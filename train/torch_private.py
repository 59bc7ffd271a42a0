"""Every use of a private torch function, in one place. torch gives no public seam for these; each says what
is lost if the private name goes (a torch upgrade that removes one breaks this module alone)."""
import torch.distributed as dist


def default_store():
    """The default process group's store: the rendezvous store the ranks share (train/hang.py publishes each
    rank's place there, train/faults.py its planted orders, train/worker.py counts the ranks out). torch has no
    public getter. (Were it gone, hangs would be named only at the timeout, and the delete race and the end count
    would need a store of their own.)"""
    return dist.distributed_c10d._get_default_store()


def stagger_first_rendezvous(nodes: int):
    """c10d's rendezvous waits a random 0-0.3 s before its first round, to spread many nodes' joins
    over time. One node has nobody to stagger against, so with nnodes=1 that wait is skipped; its
    other waits are left as they are. (Were the private _delay gone, only the saving would be lost.)"""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rendezvous

    original = getattr(rendezvous, "_race_lab_original_delay", rendezvous._delay)

    def no_random_stagger(seconds):
        if not isinstance(seconds, tuple):  # a (low, high) range is the first round's stagger
            original(seconds)

    rendezvous._race_lab_original_delay = original
    rendezvous._delay = original if nodes > 1 else no_random_stagger


def exit_barrier_within(seconds: float):
    """After its ranks end, a torch elastic agent waits up to 300 s for every other node's agent (its exit
    barrier); a node whose launcher was stopped never comes. LaunchConfig has no key for that wait, so
    it is set on the agent here. (Were the private method gone, only the shorter wait would be lost.)"""
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

    original = getattr(SimpleElasticAgent, "_race_lab_original_exit_barrier", SimpleElasticAgent._exit_barrier)

    def _exit_barrier(agent):
        agent._exit_barrier_timeout = seconds
        return original(agent)

    SimpleElasticAgent._race_lab_original_exit_barrier = original
    SimpleElasticAgent._exit_barrier = _exit_barrier
