"""A package of your own, outside race-lab, with checkpoint code to put through its scenarios.

  fastai_marker.MarkerSaveModelCallback   fastai: the writer leaves a marker file once the checkpoint is
                                          complete, and readers wait for the marker
  lightning_io.PatientCheckpointIO        Lightning: a CheckpointIO whose load waits for a file not there yet
  trainer_callback.SayBest                the Trainer: a TrainerCallback that says which best checkpoint each
                                          process had, and whether it is on its disk

Run it (from the repository root; any folder works with the package on PYTHONPATH):
  PYTHONPATH=examples race-lab -m scenario=seed,torn,stale fix=own \\
      fix._target_=my_checkpoints.fastai_marker.MarkerSaveModelCallback world_size=2
"""
