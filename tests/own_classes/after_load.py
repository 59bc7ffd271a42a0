"""A fix of the tests' own (fix._target_=after_load.FailsAfterLoad, framework=lightning, with tests/ on PYTHONPATH):
Lightning's ModelCheckpoint, except that rank 1's validate(ckpt_path="best") raises once the checkpoint is loaded
(on_validation_end), as a validate whose collective timed out does: the load ended well, the rank did not
(tests/e2e/frameworks/test_lightning.py)."""
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.trainer.states import TrainerFn


class FailsAfterLoad(ModelCheckpoint):
    def on_validation_end(self, trainer, pl_module):
        if trainer.state.fn == TrainerFn.VALIDATING and trainer.global_rank == 1:  # validate(), not fit's validation
            raise RuntimeError("rank 1 failed after its load (tests/own_classes/after_load.py)")
        super().on_validation_end(trainer, pl_module)
