"""What every resume adapter shares (workload=resume): the start of an attempt, and the plain write a fix may
replace. Each framework's resume.py calls start_attempt first, at the start of every attempt torch elastic makes."""
import os
import shutil

import torch.distributed as dist

from train.events import attempt
from train.toolkit.rank import Rank, local_rank


def start_attempt(rank: Rank, folder, empty=None):
    """The prologue of a resume attempt, on every rank: the loop_start event; on the first attempt of a fresh run,
    local rank 0 empties the checkpoint folder (empty(folder); by default it is removed whole), where a restart keeps
    what it finds; the folder made; and a barrier, so that no rank lists the folder while local rank 0 empties it."""
    checkpoint = rank.cfg["checkpoint"]
    rank.events.record("loop_start", keep_last=checkpoint["keep_last"], pointer=checkpoint["pointer"])
    if attempt() == 0 and not checkpoint["keep_existing"] and local_rank() == 0:
        (empty or remove_folder)(folder)
    os.makedirs(folder, exist_ok=True)
    dist.barrier()


def remove_folder(folder):
    shutil.rmtree(folder, ignore_errors=True)


def write_in_place(path, write):
    """The plain write: `write(f)` fills the file at `path` itself, as the frameworks ship it (a reader may see it
    half written); fixes.atomic_write is the fix that takes its place (same arguments)."""
    with open(path, "wb") as f:
        write(f)
