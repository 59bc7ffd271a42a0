"""The environment a run ran in (versions, git state, the container image), recorded in summary.json."""
import copy
import functools
import json
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def environment(framework: str = "") -> dict:
    """The environment, gathered once per process: a sweep's jobs share it (git state included), and
    each job gets its own copy; with `framework`, the run's framework and its installed version, as its contract
    names its distribution."""
    found = copy.deepcopy(_environment())
    if framework:
        from train.frameworks.registry import get

        distribution = get(framework).distribution
        found["framework"] = {"name": framework, "distribution": distribution,
                              "version": _version(distribution) if distribution else None}
    return found


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
