"""A fix of the tests' own (fix._target_=mismatched_syncs.MismatchedSyncsSaveModelCallback, with tests/ on
PYTHONPATH): rank 0 waits in a barrier while rank 1 waits in rank 0's broadcast, two different collectives
paired, which neither can end (tests/unit/toolkit/test_hang.py)."""
import torch.distributed as dist

from train.frameworks.fastai.callbacks import RaceSaveModelCallback


class MismatchedSyncsSaveModelCallback(RaceSaveModelCallback):
    def sync(self):
        if dist.get_rank() == 0:
            return self.wait("barrier", dist.barrier)
        return self.wait("agree", lambda: dist.broadcast_object_list([None], src=0))
