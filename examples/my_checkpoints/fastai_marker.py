"""A completion marker for fastai's SaveModelCallback: rank 0 writes the checkpoint, then `<name>.done`
beside it; every other rank waits until the marker exists, then loads (the signal file of Composer#2071,
NeMo's marker in #7952). No collective: ranks never wait for each other, only for the file.

race-lab's own fixes are subclasses of train.callbacks.RaceSaveModelCallback, a fastai SaveModelCallback
that owns the save, the sync and the load; a class of your own overrides the same three steps:
  write(data, last)   put the checkpoint's bytes on disk (call self.faults.write so scenarios can
                      stall or fail it halfway)
  sync() -> bool      between the save and the load; False: do not load
  load_checkpoint()   read it into the model
What it shows: the marker holds for a late or a slow writer (seed, torn), but an older checkpoint's marker
is already there when the last save is late (stale), so readers load the older weights.
"""
from train.callbacks import RaceSaveModelCallback
from train.fixes import wait_for_file


class MarkerSaveModelCallback(RaceSaveModelCallback):
    @property
    def marker(self):
        return self.checkpoint.with_name(self.checkpoint.name + ".done")

    def remove_checkpoint(self):
        super().remove_checkpoint()
        self.marker.unlink(missing_ok=True)

    def write(self, data: bytes, last: bool):
        super().write(data, last)  # fastai's way: the final name, in place
        self.marker.write_text("done\n")  # only once every byte is there

    def sync(self) -> bool:
        return self.wait("marker", lambda: wait_for_file(self.marker, self.timeout_s))
