"""A Lightning ModelCheckpoint of a team's own that also exports weights.pt (weights_file.py) at the end of fit."""
from lightning.pytorch.callbacks import ModelCheckpoint

from my_checkpoints.weights_file import export_then_load


class ExportingCheckpoint(ModelCheckpoint):
    """Exports and loads with nothing between: a race."""
    synced = False

    def on_train_end(self, trainer, pl_module):
        super().on_train_end(trainer, pl_module)
        export_then_load(pl_module, self.dirpath, self.synced)


class SyncedExportingCheckpoint(ExportingCheckpoint):
    """The same, with a barrier after the write."""
    synced = True
