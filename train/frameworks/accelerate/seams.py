"""Accelerate's write seam: where its save pre-hook writes the model file itself (both workloads)."""
from pathlib import Path

from accelerate.utils import SAFE_WEIGHTS_NAME
from safetensors.torch import save as safetensors_bytes


def write_model_file(weights: list, output_dir, write, fault):
    """In Accelerate's save pre-hook (register_save_state_pre_hook), on the writer: the bytes Accelerate would write
    for the model (safetensors, with its metadata) go to <output_dir>/model.safetensors through write(path, fill)
    (toolkit.resume.write_in_place, or a fix's fixes.atomic_write), the file filled by fault(f, data), a point of
    train/faults.py; then `weights` is emptied, so that Accelerate writes no model file (the override its docs
    describe). Without it the write point is lost: a fault in the write (torn, save_fails, kill_at=mid_write) or a
    fix's own write would have no place in Accelerate's save."""
    data = safetensors_bytes(weights[0], metadata={"format": "pt"})
    write(Path(output_dir) / SAFE_WEIGHTS_NAME, lambda f: fault(f, data))
    weights.clear()
