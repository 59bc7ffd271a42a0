# accelerate_torn_resume.py:
#   TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node=2 --max-restarts=2 \
#   accelerate_torn_resume.py
# accelerate and torch only. Each attempt resumes with load_state() (the newest checkpoint_<i>) and saves one
# automatically named checkpoint per epoch. In the first attempt the main process is SIGKILLed (OOM killer,
# preemption) halfway through writing checkpoint_1/model.safetensors.
import os
import signal
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration
from safetensors.torch import save as safetensors_bytes

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(project_dir="proj",
                                                                        automatic_checkpoint_naming=True))
model = torch.nn.Linear(4, 2)
model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))


def killed_halfway(models, weights, output_dir):
    if attempt == 0 and accelerator.is_main_process and output_dir.endswith("checkpoint_1"):
        data = safetensors_bytes(weights[0], metadata={"format": "pt"})  # the bytes save_state would write
        with open(os.path.join(output_dir, "model.safetensors"), "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)


accelerator.register_save_state_pre_hook(killed_halfway)
start, checkpoints = 0, Path("proj/checkpoints")
if checkpoints.is_dir() and any(checkpoints.iterdir()):  # resume, as users write it
    if accelerator.is_main_process:  # what the main process wrote (process 1's own file, there or not
        for folder in sorted(checkpoints.iterdir()):  # depending on when the kill landed, is left out)
            print(f"attempt {attempt} rank 0: {folder.name} holds "
                  + ", ".join(f.name + (f" ({f.stat().st_size} B)" if f.suffix == ".safetensors" else "")
                              for f in sorted(folder.iterdir()) if f.name != "random_states_1.pkl"), flush=True)
    try:
        accelerator.load_state()  # the newest checkpoint_<i>
    except Exception as e:
        print(f"attempt {attempt} rank {accelerator.process_index}: load_state() failed: {type(e).__name__}: {e}",
              flush=True)
        raise
    start = max(int(p.name.split("_")[-1]) for p in checkpoints.iterdir()) + 1
    accelerator.project_configuration.iteration = start  # load_state() leaves it at 0 (accelerate#1601)
for epoch in range(start, 3):
    accelerator.gather(torch.tensor([epoch]))  # the epoch's training (a collective)
    accelerator.save_state()  # checkpoint_<epoch>
print(f"attempt {attempt} rank {accelerator.process_index}: finished", flush=True)
accelerator.wait_for_everyone()
accelerator.end_training()
