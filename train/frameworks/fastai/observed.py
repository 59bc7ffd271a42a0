"""fix=rank0_leads for fastai: the callback users copy (rank0_leads.py, fastai's and torch's public API only) under
race-lab's observation. The copied file cannot subclass RaceSaveModelCallback (race-lab's), so this subclasses the
copied callback and observes it at its own small methods, calling them through super(): its write (save_start,
save_end, save_error, and the scenario's stall or OSError halfway through the bytes: faults.write), its read
(load_attempt), its broadcast (watched as any sync: sync events, a hang seen at once), and its end (load_done, or a
skip that says why). Only *when* it saves is race-lab's, as in RaceSaveModelCallback: the best so far, at the last
epoch always (and with checkpoint.early_saves at each improvement), so that the scenario's last-save faults happen.
checkpoint.guard is not applied: the fix's point is that no rank decides from a look of its own.

fix=own with a copy of rank0_leads.py (another class object than race-lab's, on fastai's public SaveModelCallback) is
observed alike: callback_for puts Observed before it, so both are judged by what they did."""
import copy

from fastai.callback.tracker import TrackerCallback
from fastai.torch_core import get_model
from torch.nn.parallel import DistributedDataParallel

from train.fixes import SyncFailed, watched
from train.frameworks.fastai.callbacks import RaceSaveModelCallback, model_digest
from train.frameworks.fastai.rank0_leads import (
    Rank0LeadsSaveModelCallback,
    process_rank,
)
from train.toolkit.errors import error_fields
from train.toolkit.model import weights_digest
from train.toolkit.rank import local_rank, say


class Observed:
    """Mixed in before a callback with Rank0LeadsSaveModelCallback's methods: the constructor RaceSaveModelCallback's
    fixes take (events, faults, the checkpoint config, timeout_s; fix.kwargs to the callback's own)."""

    def __init__(self, events, faults, checkpoint: dict, timeout_s: float, **kwargs):
        super().__init__(monitor="accuracy", fname=checkpoint["name"], **kwargs)
        self.events, self.faults = events, faults
        self.keep_existing, self.early_saves, self.node_local = (
            checkpoint[k] for k in ("keep_existing", "early_saves", "node_local"))
        self.best_state, self.last = None, False

    def before_fit(self):
        super().before_fit()
        path = self.path_of(self.fname)
        if not self.keep_existing and local_rank() == 0 and path.exists():  # each node its own, where node-local
            path.unlink(missing_ok=True)
        self.events.record("fit_start", train_batches=len(self.dls.train),
                           ddp=isinstance(self.learn.model, DistributedDataParallel), node_local=self.node_local)

    def after_epoch(self):
        values = self.recorder.values[-1]
        values[self.idx] = self.faults.shape_metric(values[self.idx], self.epoch)
        TrackerCallback.after_epoch(self)  # the monitored metric decides new_best
        if self.new_best:
            self.best_state = copy.deepcopy(get_model(self.learn.model).state_dict())
        self.last = self.epoch == self.n_epoch - 1
        if self.last:
            self.faults.before_last_save()
        if self.last or (self.early_saves and self.new_best):
            self._save(self.fname)

    def state_to_save(self):
        return self.best_state

    def write_checkpoint(self, path, data):
        self.events.record("save_start", epoch=self.epoch, path=str(path))
        try:
            super().write_checkpoint(path, data)
        except OSError as e:
            self.events.record("save_error", epoch=self.epoch, **error_fields(e))
            raise
        self.events.record("save_end", epoch=self.epoch, path=str(path), digest=weights_digest(self.best_state),
                           bytes=len(data))

    def write_bytes(self, f, data):
        self.faults.write(f, data, self.last)

    def read_checkpoint(self, path):
        self.events.record("load_attempt", path=str(path), bytes=path.stat().st_size if path.exists() else None)
        return super().read_checkpoint(path)

    def broadcast(self, obj):
        box = []
        if not watched(self.events, "broadcast", lambda: box.append(super(Observed, self).broadcast(obj))):
            raise SyncFailed
        if process_rank() != 0 and box[0]["loaded"]:
            self.events.record("load_attempt", source="broadcast from rank 0")
        return box[0]

    def after_fit(self, **kwargs):
        self.events.record("train_end")
        say("Attempting to load model.")
        self.faults.before_load()
        try:
            super().after_fit(**kwargs)
        except SyncFailed:
            pass
        except Exception as e:  # noqa: BLE001  (recorded, not raised)
            self.events.record("load_error", **error_fields(e))
            say(f"Load failed: {type(e).__name__}: {e}")
        self.events.record("final", digest=model_digest(self.learn.model))

    def loaded(self, path):
        super().loaded(path)
        self.events.record("load_done", digest=model_digest(self.learn.model))

    def not_loaded(self, why):
        super().not_loaded(why)
        self.events.record("skip", reason=f"{why}: every rank agreed not to load")


class ObservedRank0Leads(Observed, Rank0LeadsSaveModelCallback):
    """fix=rank0_leads (configs/fix/rank0_leads.yaml's _target_)."""


def callback_for(own: type) -> type:
    """The class fix._target_ names, to be built with race-lab's arguments: a RaceSaveModelCallback subclass (the
    fixes, or yours) or one observed already as it is; any other (a class with Rank0LeadsSaveModelCallback's methods,
    as fastai's framework.py declares: a copy of rank0_leads.py) under Observed."""
    if issubclass(own, (RaceSaveModelCallback, Observed)):
        return own
    return type(f"Observed{own.__name__}", (Observed, own), {})
