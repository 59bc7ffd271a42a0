"""Every use of a private torch function, in one place. torch gives no public seam for these; each says what
is lost if the private name goes (a torch upgrade that removes one breaks this module alone)."""
import sys

import torch.distributed as dist


def default_store():
    """The default process group's store: the rendezvous store the ranks share (train/toolkit/hang.py publishes each
    rank's place there, train/faults.py its planted orders, train/rank/worker.py counts the ranks out). torch has no
    public getter. (Were it gone, hangs would be named only at the timeout, and the delete race and the end count
    would need a store of their own.)"""
    return dist.distributed_c10d._get_default_store()


POLL_HERE_S = 0.02  # launch.all_nodes_here: the rendezvous state is read this often while a node waits for the others


def pace_rendezvous(nodes: int, all_here: bool):
    """c10d's rendezvous waits a random 0-0.3 s before its first round, to spread many nodes' joins
    over time, and then reads the shared state once a second until every node has joined. One node has
    nobody to stagger against, so with nnodes=1 that first wait is skipped. Every node's agent on this
    host (launch.all_nodes_here) skips it too, and reads the state every POLL_HERE_S: a store on
    loopback, two readers. Its other waits are left as they are. (Were the private _delay gone, only
    the saving would be lost.)"""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rendezvous

    original = getattr(rendezvous, "_race_lab_original_delay", rendezvous._delay)

    def paced(seconds):
        if isinstance(seconds, tuple):  # a (low, high) range is the first round's stagger
            if nodes > 1 and not all_here:
                original(seconds)
        else:  # the wait between two reads of the state
            original(POLL_HERE_S if all_here else seconds)

    rendezvous._race_lab_original_delay = original
    rendezvous._delay = paced


def name_rendezvous_events_cheaply():
    """c10d's rendezvous names the method behind each event it records with inspect.stack(), which reads the
    source of every frame and, for each, searches sys.modules: in a node agent of launch.all_nodes_here,
    forked from a forkserver that imported fastai, about 0.3 s an event on 2 busy cores, a dozen events a
    run. sys._getframe gives the same name at once. (Were the module's get_method_name gone or changed,
    only the saving would be lost.)"""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as rendezvous

    def get_method_name(depth=2):
        try:
            return sys._getframe(depth).f_code.co_name  # inspect.stack()[depth] is the same frame
        except ValueError:  # a stack shallower than depth
            return "no_method_name"

    rendezvous.get_method_name = get_method_name


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
