# accelerate_total_limit.py: torchrun --standalone --nproc_per_node=2 accelerate_total_limit.py
# accelerate and torch only. With ProjectConfiguration(automatic_checkpoint_naming=True, total_limit=1), what is on
# disk at the moment save_state() starts writing checkpoint_1's files (its save_state pre-hook runs right then).
import os

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration

accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
    project_dir="proj", automatic_checkpoint_naming=True, total_limit=1))
model = accelerator.prepare(torch.nn.Linear(4, 2))


def before_writing(models, weights, output_dir):
    if accelerator.is_main_process:
        print(f"rank 0: about to write {os.path.basename(output_dir)}/model.safetensors; proj/checkpoints holds "
              f"{', '.join(sorted(os.listdir('proj/checkpoints')))}", flush=True)


accelerator.register_save_state_pre_hook(before_writing)
for epoch in range(2):
    accelerator.gather(torch.tensor([epoch]))  # the epoch's training (a collective)
    accelerator.save_state()  # checkpoint_<epoch>
accelerator.wait_for_everyone()
accelerator.end_training()
