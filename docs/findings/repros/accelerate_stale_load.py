# accelerate_stale_load.py: torchrun --standalone --nproc_per_node=2 accelerate_stale_load.py
# accelerate and torch only. Every process calls save_state() each epoch and load_state() at the end, with nothing
# in between; the main process is late at the last save. So that the outcome does not depend on timing, "late" is
# made exact: the main process starts its last save once process 1 has finished loading (or after 60 s, so that a
# version whose load_state waits for the save shows that instead of hanging).
import os
import time

import torch
from accelerate import Accelerator

accelerator = Accelerator(cpu=True)
model = accelerator.prepare(torch.nn.Linear(4, 2))
net = accelerator.unwrap_model(model)

for epoch in range(2):  # two epochs, each a new best, saved as the docs show (save_state on every process)
    with torch.no_grad():
        net.weight.fill_(epoch)  # what training changed this epoch (the same on every process)
    accelerator.gather(torch.tensor([epoch]))  # the epoch's metric, gathered as usual (a collective)
    if epoch == 1 and accelerator.is_main_process:  # the main process is late (a slow disk, a GC pause)
        deadline = time.monotonic() + 60
        while not os.path.exists("process1-loaded") and time.monotonic() < deadline:
            time.sleep(0.1)
    accelerator.save_state("ckpt")

accelerator.load_state("ckpt")  # every process loads the best at the end
if accelerator.process_index == 1:
    open("process1-loaded", "w").close()
print(f"rank {accelerator.process_index}: loaded the weights of epoch {net.weight[0, 0].item():.0f} "
      f"(the last save was epoch 1)", flush=True)
accelerator.wait_for_everyone()
accelerator.end_training()
