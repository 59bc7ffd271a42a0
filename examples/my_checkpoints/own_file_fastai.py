"""A fastai SaveModelCallback of a team's own that also exports weights.pt (weights_file.py) after fit. Its base
is race-lab's fastai callback with a barrier between fastai's save and its load (fix=barrier), so that fastai's
own load of the best model holds (as shipped it races: the seed scenario) and only the export is under test."""
from train.callbacks import BarrierSaveModelCallback

from my_checkpoints.weights_file import export_then_load


class ExportingSaveModelCallback(BarrierSaveModelCallback):
    """Exports and loads with nothing between: a race."""
    synced = False

    def after_fit(self, **kwargs):
        super().after_fit(**kwargs)
        export_then_load(self.learn.model, self.checkpoint.parent, self.synced)


class SyncedExportingSaveModelCallback(ExportingSaveModelCallback):
    """The same, with a barrier after the write."""
    synced = True
