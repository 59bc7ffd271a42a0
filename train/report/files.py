"""Atomic writes: a result file is whole or absent, never half-written."""
import json
import os
from pathlib import Path


def write_json_atomic(path: Path, data: dict):
    """Write to a temporary name, then rename: a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def save_png_atomic(fig, path: Path):
    """A matplotlib figure as a PNG, written as write_json_atomic writes: no half-drawn image is left."""
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png", dpi=110, metadata={"Software": None})
    os.replace(tmp, path)
