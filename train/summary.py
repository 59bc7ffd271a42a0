"""summary.json for one run, the environment it ran in, and the console table."""
import copy
import functools
import json
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGE_INFO = Path("/etc/race-lab/image.json")  # written into the container image at build time


def _version(package):
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git():
    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
    try:
        sha = git("rev-parse", "HEAD")
        if sha.returncode != 0:
            return None
        return {"sha": sha.stdout.strip(), "dirty": bool(git("status", "--porcelain").stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return None


def environment() -> dict:
    """The environment, gathered once per process: a sweep's jobs share it (git state included), and
    each job gets its own copy."""
    return copy.deepcopy(_environment())


@functools.lru_cache(maxsize=None)
def _environment() -> dict:
    import torch  # already imported by the launcher; never fastai here

    cuda = torch.cuda.is_available()
    try:  # the NCCL that torch carries, GPUs or not
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None
    except Exception:
        nccl = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "fastai": _version("fastai"),
        "accelerate": _version("accelerate"),
        "hydra": _version("hydra-core"),
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "git": _git(),
        "image": json.loads(IMAGE_INFO.read_text()) if IMAGE_INFO.exists() else None,
    }


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


def align(rows) -> str:
    """Rows of strings as left-aligned columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def format_table(verdict: dict) -> str:
    """Each rank's outcome, when it started loading, how that stood against the save's end, and its wait."""
    rows = [["rank", "outcome", "load at", "vs save end", "sync wait"]]
    for r in verdict["ranks"]:
        t = r["timings"]

        def secs(key, sign=""):
            return f"{t[key]:{sign}.2f} s" if key in t else "-"
        rows.append([str(r["rank"]), r["outcome"], secs("load_attempt"), secs("load_after_save_end", "+"),
                     secs("wait")])
    return align(rows)
