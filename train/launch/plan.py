"""Check a composed config and decide device and backend, before any rank starts.

Each key's own range is declared in train/config.py; the rules here tie keys together or hold
the config against the machine. Pure functions over plain data: a bad value raises ConfigError
with one line that names the key and the value.
"""
from dataclasses import dataclass

from train.config import ConfigError, check
from train.frameworks.base import CAPABILITIES
from train.frameworks.registry import NotAFramework, get

RANKS_PER_CORE = 4  # more CPU ranks than this per core only with launch.oversubscribe=true
RANK_MEMORY_MIB = 600  # what one CPU rank needs (torch, fastai, a small model), measured here: ~450 MiB
FDS_PER_RANK = 16  # pipes, log files and sockets the launcher and a rank hold for each rank


@dataclass(frozen=True)
class Machine:
    cpus: int
    gpus: int
    memory_mib: int  # available now
    open_files: int  # the soft RLIMIT_NOFILE


@dataclass(frozen=True)
class Plan:
    device: str  # cpu | cuda
    backend: str  # gloo | nccl
    reason: str  # why this device/backend, for the console and summary.json
    note: str = ""  # a line the run says before it starts (more CPU ranks than cores), or ""


def _bad(key, value, why):
    return ConfigError(f"{key}={value!r}: {why}")


def _require(ok, key, value, why):
    if not ok:
        raise _bad(key, value, why)


def check_config(cfg: dict) -> None:
    """Raise ConfigError for the first bad value; the machine is checked in make_plan."""
    check(cfg)
    ws = cfg["world_size"]
    in_range = f"must be a rank in 0..{ws - 1} (world_size={ws})"
    _require(cfg["skew"]["rank"] < ws, "skew.rank", cfg["skew"]["rank"], in_range)
    crash = cfg["fault"]["crash_rank"]
    _require(crash is None or crash < ws, "fault.crash_rank", crash, "must be null or a rank in "
             f"0..{ws - 1} (world_size={ws})")
    best = cfg["fault"]["best_epoch"]
    _require(best is None or best < cfg["epochs"], "fault.best_epoch", best,
             f"must be null, -1 or an epoch in 0..{cfg['epochs'] - 1} (epochs={cfg['epochs']})")
    endpoint = cfg["rdzv"]["endpoint"]
    host, _, port = endpoint.rpartition(":")
    _require(host and port.isdigit() and int(port) < 65536, "rdzv.endpoint", endpoint, "must be HOST:PORT")
    nodes = cfg["nnodes"]
    _require(cfg["node_rank"] < nodes, "node_rank", cfg["node_rank"], f"must be a node in 0..{nodes - 1} "
             f"(nnodes={nodes})")
    _require(ws % nodes == 0, "world_size", ws, f"must be a multiple of nnodes={nodes} (the same ranks on each node)")
    if nodes > 1 and not cfg["launch"]["all_nodes_here"]:
        _require(int(port) != 0, "rdzv.endpoint", endpoint, f"with nnodes={nodes} every node needs the same "
                 "HOST:PORT, reachable from all of them (torchrun's --rdzv-endpoint)")
        _require(cfg["rdzv"]["id"] != "auto", "rdzv.id", "auto", f"with nnodes={nodes} give every node the same id, "
                 "new for each run (torchrun's --rdzv-id)")
    for key, value in (("checkpoint.name", cfg["checkpoint"]["name"]), ("fix.name", cfg["fix"]["name"]),
                       ("framework.name", cfg["framework"]["name"]), ("rdzv.id", cfg["rdzv"]["id"])):
        _require(is_name(value), key, value, "must be a name, not a path: 1 to 200 characters, no '/' or NUL, "
                 "not '.' or '..'")  # each becomes part of a file or folder name
    framework, workload = the_framework(cfg), cfg["workload"]
    _require(workload in framework.workloads, "workload", workload, f"framework={framework.name} has no {workload} "
             f"path: {framework.why_lacking(workload)}")
    unknown = [need for need in cfg["needs"] if need not in CAPABILITIES]
    _require(not unknown, "needs", unknown, f"each must be one of {', '.join(CAPABILITIES)} "
             "(train/frameworks/base.py's CAPABILITIES)")
    _require(framework.name == "fastai" or cfg["data"]["name"] == "digits", "data", cfg["data"]["name"],
             f"framework={framework.name} trains on data=digits only")
    data = cfg["data"]
    if "classes" in data:
        _require(len(data["classes"]) == 2 and len(set(data["classes"])) == 2, "data.classes", data["classes"],
                 "must be two different digits")


WORKLOAD_WORDS = {"load_best": "the load of the best at the end (workload=load_best)",
                  "resume": "the resume after a restart (workload=resume)"}


def the_framework(cfg: dict):
    """The run's framework (train/frameworks/registry.py); ConfigError when none is registered by that name."""
    try:
        return get(cfg["framework"]["name"])
    except NotAFramework as e:
        raise ConfigError(str(e)) from None


def framework_cannot(cfg: dict):
    """Why the scenario cannot happen in the run's framework, whatever the fix: it needs a workload or a capability
    the framework lacks ("needs <it>; <framework> has none: <the framework's one-line why>"), or None."""
    framework = the_framework(cfg)
    for need in [cfg["workload"], *cfg.get("needs", [])]:
        why = framework.why_lacking(need)
        if why:
            return f"needs {need}; {framework.name} has none: {why}"
    if framework.own_workers and cfg["nnodes"] > 1:
        return (f"needs {cfg['nnodes']} nodes; {framework.name} starts its own workers from one driver (its "
                "contract's own_workers): race-lab runs it on one node")
    return None


# what a fix may need of a scenario (fix.needs): whether the scenario's config gives it, and the words for it
SCENARIO_GIVES = {
    "sync_save": (lambda cfg: not cfg["checkpoint"]["async_save"],
                  "synchronous saves (this scenario saves async: checkpoint.async_save)"),
    "async_save": (lambda cfg: cfg["checkpoint"]["async_save"],
                   "an async save (checkpoint.async_save; this scenario saves synchronously)"),
    "rotation": (lambda cfg: cfg["checkpoint"]["keep_last"] > 0,
                 "old checkpoints deleted (nothing rotates here: checkpoint.keep_last=0)"),
}


def not_applicable(cfg: dict):
    """Why this scenario x fix x framework makes no sense (its cell is n/a, not run), or None. In this order:
    the scenario's own not_for line for the fix (`resume/atomic`: for one workload), where no rule derives it;
    the scenario needs a workload or capability the framework lacks (the framework's one-line why), or, for a
    class of yours, one its contract's own_lacks names; the fix is
    not for the run's workload; the fix needs what the scenario does not do (SCENARIO_GIVES); the framework has
    no way to do the fix (its contract's fixes, and its why where it has one)."""
    fix, workload, not_for = cfg["fix"]["name"], cfg["workload"], cfg["not_for"]
    framework = the_framework(cfg)
    written = not_for.get(f"{workload}/{fix}") or not_for.get(fix)
    if written:
        return written
    cannot = framework_cannot(cfg)
    if cannot:
        return cannot
    unrun = [need for need in cfg.get("needs", []) if fix == "own" and need in framework.own_lacks]
    if unrun:
        return f"needs {unrun[0]}; a class of yours cannot run it in {framework.name}: {framework.own_lacks[unrun[0]]}"
    if workload not in cfg["fix"]["workloads"]:
        words = [WORKLOAD_WORDS.get(w, f"workload={w}") for w in cfg["fix"]["workloads"]] or ["no workload"]
        return f"a fix of {' and '.join(words)}; this run's is {WORKLOAD_WORDS.get(workload, f'workload={workload}')}"
    for need in cfg["fix"].get("needs", []):
        gives, words = SCENARIO_GIVES[need]
        if not gives(cfg):
            return f"fix={fix} needs {words}"
    return framework.why_no_fix(fix, workload)


def n_a_line(scenario, cfg: dict, reason: str) -> str:
    """An n/a cell's line, as a sweep records it and a single run refuses it: `scenario=torn fix=dcp: n/a: ...`."""
    framework = cfg["framework"]["name"]
    which = f"scenario={scenario} fix={cfg['fix']['name']}" + ("" if framework == "fastai" else
                                                                f" framework={framework}")
    return f"{which}: n/a: {reason}"


def is_name(text) -> bool:
    """A name for one file or folder, never a path: not empty, no separator, not . or .., no NUL, not too long."""
    return isinstance(text, str) and 0 < len(text) <= 200 and "/" not in text and "\0" not in text \
        and text not in (".", "..")


def ranks_on_this_host(cfg: dict) -> int:
    """All of them when every node runs here (launch.all_nodes_here), else one node's share."""
    return cfg["world_size"] // (1 if cfg["launch"]["all_nodes_here"] else cfg["nnodes"])


def _check_machine(cfg: dict, device: str, machine: Machine, ws: int):
    if device == "cpu" and not cfg["launch"]["oversubscribe"]:
        limit = RANKS_PER_CORE * machine.cpus
        _require(ws <= limit, "world_size", ws, f"more than {RANKS_PER_CORE} CPU ranks per core: this machine has "
                 f"{machine.cpus} core(s), so at most {limit}; launch.oversubscribe=true allows more")
    if device == "cpu":
        need = ws * RANK_MEMORY_MIB
        _require(need <= machine.memory_mib, "world_size", ws, f"needs about {need} MiB for its ranks, "
                 f"{machine.memory_mib} MiB available")
    fds = (ws + 4) * FDS_PER_RANK
    _require(fds <= machine.open_files, "world_size", ws, f"needs about {fds} open files, the limit is "
             f"{machine.open_files} (ulimit -n)")


def make_plan(cfg: dict, machine: Machine) -> Plan:
    """Check cfg, then pick device and backend for the ranks and hold them against the machine."""
    check_config(cfg)
    ranks = ranks_on_this_host(cfg)
    device, backend = cfg["device"], cfg["backend"]
    gpu_count = machine.gpus
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
    _check_machine(cfg, device, machine, ranks)

    if cfg["device"] == "auto" and cfg["backend"] == "auto":
        reason = (f"auto: {gpu_count} GPU(s) visible for {ranks} rank(s) -> "
                  f"{'CUDA+NCCL' if device == 'cuda' else 'CPU+gloo'}")
    else:
        reason = f"asked for device={cfg['device']} backend={cfg['backend']} ({gpu_count} GPU(s) visible)"
    note = (f"world_size={cfg['world_size']}: {ranks} CPU ranks on {machine.cpus} core(s): runs will be slower, and "
            "a hang is named later, than with a core for each rank" if device == "cpu" and ranks > machine.cpus else "")
    return Plan(device=device, backend=backend, reason=reason, note=note)


def this_machine() -> Machine:
    import os
    import resource

    import psutil
    import torch

    return Machine(cpus=os.cpu_count() or 1, gpus=torch.cuda.device_count(),
                   memory_mib=psutil.virtual_memory().available // 2**20,
                   open_files=resource.getrlimit(resource.RLIMIT_NOFILE)[0])
