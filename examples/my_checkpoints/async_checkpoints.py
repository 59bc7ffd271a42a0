"""Async saves for a plain torch DDP loop as many loops write them (torchtitan's and KempnerForge's shape before
their fixes): docs/fixes/torch_loop-durable.md's DurableCheckpoints with its completion step taken out.

NaiveAsyncCheckpoints waits for the previous save's Future, dispatches the next with dcp.async_save straight into
epoch<k>/, and at once names it in `latest` and deletes the older ones: a rank killed with the save in flight leaves
`latest` naming a folder that was never committed (no .metadata), the older checkpoint already gone. Its close()
does nothing, so the run ends with its last save pending. Run it with:

    race-lab check framework=torch_loop check.saves=async fix=own \\
        fix._target_=my_checkpoints.async_checkpoints.NaiveAsyncCheckpoints +fix.kwargs.keep_last=1
"""
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from train.frameworks.torch_loop.durable import DurableCheckpoints


class NaiveAsyncCheckpoints(DurableCheckpoints):
    def save(self, epoch: int, state: dict):
        if self.pending is not None:
            self.pending[0].result()  # the previous save's Future, as torch documents
        path = self.folder / f"epoch{epoch}"
        payload = {"model": state["model"], "epoch": torch.tensor(state["epoch"]), "step": torch.tensor(state["step"])}
        future = dcp.async_save(payload, checkpoint_id=str(path), process_group=self.save_group())
        self.pending = (future, path, path)
        if dist.get_rank() == 0:  # at once, before the save is durable
            self.write_pointer(path.name)
            self.delete_older(path)

    def close(self):
        pass  # the process ends with its last save pending
