"""A TrainerCallback of your own, for the Hugging Face Trainer: when train() ends (after the Trainer's load of
the best checkpoint), each process says which best checkpoint it had and whether that folder is on its disk,
the check a user adds after being bitten by node-local disks.

Put it in with `framework=transformers fix=own fix._target_=my_checkpoints.trainer_callback.SayBest`:
race-lab adds it to the Trainer's callbacks beside its own observers. A Trainer subclass of yours works too
(race-lab's calls to super() reach its methods first).
"""
import os

from transformers import TrainerCallback


class SayBest(TrainerCallback):
    def on_train_end(self, args, state, control, **kwargs):
        best = state.best_model_checkpoint
        here = bool(best) and os.path.isdir(best)
        print(f"SayBest: process {args.process_index}: best {os.path.basename(best or '-')}, "
              f"{'on this disk' if here else 'NOT on this disk'}", flush=True)
