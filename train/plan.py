"""Check a composed config and decide device and backend, before any rank starts.

Pure functions over plain data, so every rule is easy to test. A bad value raises
ConfigError with one line that names the key and the value.
"""
from dataclasses import dataclass


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Plan:
    device: str  # cpu | cuda
    backend: str  # gloo | nccl
    reason: str  # why this device/backend, for the console and summary.json


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _bad(key, value, why):
    return ConfigError(f"{key}={value!r}: {why}")


def _require(ok, key, value, why):
    if not ok:
        raise _bad(key, value, why)


def check_config(cfg: dict) -> None:
    """Raise ConfigError for the first bad value; device availability is checked in make_plan."""
    ws = cfg["world_size"]
    _require(_is_int(ws) and ws >= 1, "world_size", ws, "must be an integer >= 1")
    ep = cfg["epochs"]
    _require(_is_int(ep) and ep >= 1, "epochs", ep, "must be an integer >= 1 (the last epoch saves)")
    _require(_is_number(cfg["lr"]) and cfg["lr"] > 0, "lr", cfg["lr"], "must be a number > 0")
    _require(_is_int(cfg["seed"]), "seed", cfg["seed"], "must be an integer")
    _require(_is_int(cfg["repeat"]) and cfg["repeat"] >= 0, "repeat", cfg["repeat"], "must be an integer >= 0")

    skew = cfg["skew"]
    _require(_is_number(skew["seconds"]) and skew["seconds"] >= 0, "skew.seconds", skew["seconds"],
             "must be a number >= 0")
    _require(_is_int(skew["rank"]) and 0 <= skew["rank"] < ws, "skew.rank", skew["rank"],
             f"must be a rank in 0..{ws - 1} (world_size={ws})")
    _require(skew["at"] in ("before_save", "mid_write"), "skew.at", skew["at"], "must be before_save or mid_write")
    _require(skew["at"] != "mid_write" or skew["rank"] == 0, "skew.at", skew["at"],
             f"stalls the writer, so it needs skew.rank=0 (the saving rank), not {skew['rank']}")
    crash = cfg["crash_rank"]
    _require(crash is None or (_is_int(crash) and 0 <= crash < ws), "crash_rank", crash,
             f"must be null or a rank in 0..{ws - 1} (world_size={ws})")

    for key in ("collective_s", "run_s"):
        v = cfg["timeout"][key]
        _require(_is_number(v) and v > 0, f"timeout.{key}", v, "must be a number of seconds > 0")

    _require(cfg["device"] in ("auto", "cpu", "cuda"), "device", cfg["device"], "must be auto, cpu or cuda")
    _require(cfg["backend"] in ("auto", "gloo", "nccl"), "backend", cfg["backend"], "must be auto, gloo or nccl")
    _require(cfg["expect"] in (None, "race", "clean"), "expect", cfg["expect"], "must be null, race or clean")

    _require(cfg["launch"]["start_method"] in ("spawn", "forkserver"), "launch.start_method",
             cfg["launch"]["start_method"], "must be spawn or forkserver")


def make_plan(cfg: dict, gpu_count: int) -> Plan:
    """Check cfg, then pick device and backend for the ranks."""
    check_config(cfg)
    ranks = cfg["world_size"]
    device, backend = cfg["device"], cfg["backend"]
    enough = gpu_count >= ranks

    if device == "auto":
        if backend == "nccl":
            device = "cuda"
        elif backend == "gloo":
            device = "cpu"
        else:
            device = "cuda" if enough else "cpu"
    if backend == "auto":
        backend = "nccl" if device == "cuda" and enough else "gloo"

    if backend == "nccl" and device != "cuda":
        raise _bad("backend", "nccl", "needs device=cuda")
    if device == "cuda" and not enough:  # fastai/Accelerate put rank r on cuda:r
        key, value = ("backend", "nccl") if backend == "nccl" else ("device", "cuda")
        raise _bad(key, value, f"needs one GPU per rank: {ranks} ranks, {gpu_count} GPU(s) visible")

    if cfg["device"] == "auto" and cfg["backend"] == "auto":
        reason = (f"auto: {gpu_count} GPU(s) visible for {ranks} rank(s) -> "
                  f"{'CUDA+NCCL' if device == 'cuda' else 'CPU+gloo'}")
    else:
        reason = f"asked for device={cfg['device']} backend={cfg['backend']} ({gpu_count} GPU(s) visible)"
    return Plan(device=device, backend=backend, reason=reason)
