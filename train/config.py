"""The config schema: every key, its type, default, allowed range and meaning, declared once.

Hydra composes `configs/train.yaml` on top of `TrainConfig` (registered below as `train_schema`),
so a key that is not declared here, or a value of the wrong type, is refused while composing.
`check()` enforces the ranges (the rules across keys: train/launch/plan.py); `python -m train.config` prints docs/keys.md.
"""
import math
import sys
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, get_args, get_origin

from hydra.core.config_store import ConfigStore


def key(default, doc, *, min=None, above=None, max=None, choices=None, only=None, needs=()):
    """A config key: its default, one line on its meaning, and its allowed values. only: the runs that read it,
    {dotted key: values}; needs: a framework capability one of which the run's framework must provide (base.py's
    CAPABILITIES). A user who sets it for another run is refused (train/launch/preflight.py)."""
    meta = {"doc": doc, "min": min, "above": above, "max": max, "choices": choices, "only": only, "needs": needs,
            "may_be_empty": default == []}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def group(cls, doc):
    return field(default_factory=cls, metadata={"doc": doc})


@dataclass
class SkewConfig:
    rank: int = key(0, "the late rank", min=0)
    seconds: float = key(3.0, "how long it stalls right before its last save", min=0)
    end_when_settled: bool = key(False, "end the stall sooner, once every other rank is past its load or waits in a "
                                        "collective that outlasts it: no rank does anything else, it only waits "
                                        "less (make matrix and race-lab check set it)")
    mid_write_s: float = key(0.0, "rank 0 also stalls this long halfway through writing the last checkpoint (torn)",
                             min=0, only={"workload": ["load_best"]})


@dataclass
class FaultConfig:
    read_delay_s: float = key(0.0, "every rank but rank 0 pauses this long at the start of its load (torn)", min=0)
    crash_rank: Optional[int] = key(None, "this rank dies where its last save would start", min=0)
    save_error: Optional[str] = key(None, "rank 0's last save raises this OSError inside torch.save (save_fails)",
                                    choices=["ENOSPC", "EIO", "EROFS"], only={"workload": ["load_best"]})
    misdetect_rank: bool = key(False, "at the last save every process believes it is rank 0, as when RANK and "
                                      "WORLD_SIZE are unset (many_writers)")
    best_epoch: Optional[int] = key(None, "shape the monitored metric so this epoch is the best, -1 the last "
                                          "(skip_if_missing, stale)", min=-1)
    kill_epoch: Optional[int] = key(None, "the resume (workload=resume), first attempt only: rank 0 is killed with "
                                          "SIGKILL at this epoch's save (crash_mid_save, pointer_first, resume_disagree)", min=0,
                                    only={"workload": ["resume"]})
    kill_at: str = key("mid_write", "where: halfway through writing the checkpoint, or once its save is complete; "
                                    "before_shard: rank 1, before its shard lands (a framework with sharded_state, shard_lost)",
                       choices=["mid_write", "after_save", "before_shard"], only={"workload": ["resume"]})
    stale_listing: bool = key(False, "after a restart, every rank but 0 lists the checkpoints as a stale directory "
                                     "cache would: without the newest (resume_disagree)", only={"workload": ["resume"]})
    delete_race: bool = key(False, "two ranks delete the same old checkpoint, rank 0 first: it deletes once a peer has "
                                   "listed the file, the peer once rank 0 has deleted it (cleanup)",
                            only={"workload": ["resume"]})
    older_run: bool = key(False, "framework=deepspeed: before the first attempt, an earlier run of another seed "
                                 "(seed+1) leaves its epoch-0 checkpoint and its tag in checkpoint.dir, as that run's "
                                 "fix wrote them (stale_tag)",
                          only={"workload": ["resume"]}, needs=("older_run",))
    async_fault: Optional[str] = key(None, "checkpoint.async_save, at fault.kill_epoch's save (first attempt): "
                                           "in_flight, rank 0 killed while the save is written (async_in_flight); "
                                           "shared_group, the save's collectives on the training's group "
                                           "(async_shared_group); overwrite, every save into one folder and rank 1 "
                                           "killed before its shard (dcp_overwrite); slow_write (framework=lightning), "
                                           "rank 0's write takes fault.slow_write_s (async_top_k); exit_pending, the "
                                           "loop does not wait for its last save and rank 0's shard takes 3 s "
                                           "(async_exit_pending); overlap, each save dispatched without waiting for "
                                           "the one before (async_overlap); docs/async.md says each",
                                     choices=["in_flight", "shared_group", "overwrite", "slow_write", "exit_pending",
                                              "overlap"],
                                     only={"checkpoint.async_save": [True]})
    slow_write_s: float = key(4.0, "how long rank 0's slow write takes (a slow disk)", above=0, max=86400,
                              only={"fault.async_fault": ["slow_write"]})


@dataclass
class CheckpointConfig:
    name: str = key("best", "the file is <dir>/<name>.pth")
    dir: str = key("${hydra:runtime.output_dir}/models", "where rank 0 writes it")
    keep_existing: bool = key(False, "keep a checkpoint left in dir by an earlier run (else rank 0 removes it)")
    early_saves: bool = key(False, "also save on improvement before the last epoch, so an older file is there (stale)")
    node_local: bool = key(False, "each node keeps its checkpoints on its own disk, no shared filesystem "
                                  "(launch.node_disks says how, on one host)")
    guard: str = key("none", "a local exists() check that guards the load (fastai v1) or the sync and the load "
                             "(transformers#40923)", choices=["none", "load", "sync"])
    keep_last: int = key(0, "the resume: keep the newest N checkpoints, deleting older ones after each save; "
                            "0 keeps all (cleanup)", min=0, only={"workload": ["resume"]})
    pointer: bool = key(False, "the resume: find the newest checkpoint through a `latest` pointer file "
                               "(DeepSpeed's), not by listing the folder (pointer_first)",
                   only={"workload": ["resume"]}, needs=("pointer",))
    async_save: bool = key(False, "save in the background while training goes on: framework=torch_loop with torch's "
                                  "dcp.async_save, waited on through its Future; framework=lightning (workload=resume) "
                                  "with Lightning's AsyncCheckpointIO; each save records when it was dispatched and "
                                  "when it was durable (docs/async.md)",
                           only={"workload": ["resume"]}, needs=("dcp_async_save", "async_top_k"))


@dataclass
class TimeoutConfig:
    collective_s: float = key(60.0, "a barrier, collective or wait longer than this fails (outcome: timeout); whole "
                                    "seconds for torch's rendezvous, so at least 1", min=1, max=86400)
    run_s: float = key(900.0, "the launcher stops every rank of a run that lasts longer, restarts included", above=0,
                       max=604800)


@dataclass
class LaunchConfig:
    start_method: str = key("forkserver", "forkserver: ranks fork from a process that imported fastai once; "
                                          "spawn: each starts afresh", choices=["forkserver", "spawn"])
    oversubscribe: bool = key(False, "allow more than 4 CPU ranks per core")
    all_nodes_here: bool = key(False, "start every node's agent on this host, over loopback, standing in for nnodes "
                                      "machines; their records land in one run dir")
    node_disks: str = key("auto", "with checkpoint.node_local and launch.all_nodes_here, how each node gets a disk "
                                  "of its own: mount: its agent in its own mount namespace with a private tmpfs on "
                                  "checkpoint.dir (root or user namespaces); folder: <dir>/node<K>, which a framework "
                                  "that broadcasts rank 0's path sees past; auto: mount where the machine allows it",
                          choices=["auto", "mount", "folder"],
                          only={"checkpoint.node_local": [True], "launch.all_nodes_here": [True]})
    max_restarts: int = key(0, "torch elastic's max_restarts: how often the agent restarts the whole worker group "
                               "after a rank fails; each restart is an attempt (TORCHELASTIC_RESTART_COUNT)", min=0)
    echo_ranks: bool = key(False, "in a sweep (-m), print every rank's full output and each job's table on the console "
                                  "too, as a single run does; else the jobs' progress (the output stays in the run "
                                  "dir's logs/ and console.log)")
    job_lines: bool = key(False, "a line per job as it ends (sweeps, the matrix, race-lab check); else a progress bar")


@dataclass
class CheckConfig:
    repeats: int = key(5, "race-lab check: runs of each scenario", min=1, max=100)
    disks: str = key("any", "race-lab check: your setup's checkpoint folder; shared: one filesystem every node reads "
                            "(no_shared_fs is left out); node_local: each node's own disk; any: either",
                     choices=["any", "shared", "node_local"])
    restarts: bool = key(True, "race-lab check: whether your jobs restart after a crash and resume (false leaves "
                               "out the resume scenarios)")
    saves: str = key("sync", "race-lab check: how your code saves; sync leaves out the async saves' scenarios, async "
                             "checks only those (framework=torch_loop's dcp.async_save, lightning's AsyncCheckpointIO)",
                     choices=["sync", "async"])
    jobs: int = key(0, "race-lab check: runs side by side; 0: one more than cores", min=0)
    strict: bool = key(False, "race-lab check fix=own: true fails the check on a scenario your class cannot run")
    keep_runs: bool = key(False, "race-lab check: every run kept whole; else a run that held keeps only its records")


@dataclass
class RdzvConfig:
    endpoint: str = key("localhost:0", "torchrun's --rdzv-endpoint: HOST:PORT of the c10d rendezvous; port 0 takes a "
                                       "free one")
    id: str = key("auto", "torchrun's --rdzv-id: the run's name at the rendezvous; auto: a new one for each run "
                          "(give every node the same one when nnodes > 1)")


@dataclass
class FixConfig:
    name: str = key("???", "the fix, from configs/fix/")  # ???: set by the group
    _target_: Optional[str] = key(None, "the class that does it, for frameworks that take one (fastai: a "
                                        "SaveModelCallback subclass in train/frameworks/fastai/callbacks.py, or your own); null: "
                                        "the framework's adapter does the fix by its name; yours only with "
                                        "fix=own", only={"fix.name": ["own"]})
    workloads: List[str] = key(["load_best"], "the workloads this fix is for (set by each fix); with another "
                                              "workload its cells are n/a", choices=["load_best", "resume"])
    needs: List[str] = key([], "what the fix needs of a scenario (set by each fix): sync_save or async_save, how it "
                               "saves (checkpoint.async_save); rotation, old checkpoints deleted (checkpoint.keep_last); "
                               "in a scenario without it the cell is n/a (train/launch/plan.py)",
                     choices=["sync_save", "async_save", "rotation"])
    kwargs: Dict[str, Any] = key({}, "fix=own: keyword arguments for your class's constructor, e.g. "
                                     "+fix.kwargs.wait_s=5; checked before any rank starts")
    ckpt_path: str = key("last", "fix=own, Lightning's resume: what trainer.fit(ckpt_path=...) gets at each attempt's "
                                 "start: last (each rank finds it, as shipped), or module.function of yours, called "
                                 "with the checkpoint folder on every rank; checked before any rank starts",
                         only={"fix.name": ["own"], "framework.name": ["lightning"]})


@dataclass
class FrameworkConfig:
    name: str = key("fastai", "which framework's own save-best and load-at-the-end code runs, from "
                              "configs/framework/")
    zero_stage: int = key(1, "framework=deepspeed: ZeRO's stage (1: optimizer state partitioned, 2: gradients too, "
                             "3: parameters too); each rank saves its own partition", min=1, max=3,
                          only={"framework.name": ["deepspeed"]})


@dataclass
class DigitsData:
    name: str = key("digits", "scikit-learn's bundled 8x8 digits (offline), a stand-in for MNIST_SAMPLE")
    classes: List[int] = key([3, 7], "the two digits to tell apart", min=0, max=9)
    valid_pct: float = key(0.2, "share of images held out for validation", above=0, max=0.9)
    batch_size: int = key(16, "images per batch on each rank", min=1)


@dataclass
class MnistSampleData:
    name: str = key("mnist_sample", "fastai's MNIST_SAMPLE (3 vs 7, 28x28), as in the seed; needs a download")
    url: str = key("https://s3.amazonaws.com/fast-ai-sample/mnist_sample.tgz", "where untar_data fetches it")
    cache: str = key("${oc.env:FASTAI_HOME,'~/.fastai'}/data/mnist_sample", "where untar_data keeps it; there: "
                                                                            "no download")
    batch_size: int = key(64, "images per batch on each rank", min=1)


DATA = {"digits": DigitsData, "mnist_sample": MnistSampleData}


@dataclass
class TrainConfig:
    world_size: int = key(3, "ranks in all, over every node", min=1)
    nnodes: int = key(1, "torchrun's --nnodes: the machines the ranks are spread over, world_size/nnodes each", min=1)
    node_rank: int = key(0, "torchrun's --node-rank: which of them this launcher is", min=0)
    workload: str = key("load_best", "what training does with checkpoints: load_best keeps the best and loads it on "
                                     "every rank at the end; resume saves every epoch and each attempt resumes from "
                                     "the newest (set by the resume scenarios)", choices=["load_best", "resume"])
    epochs: int = key(3, "epochs; the last one always saves", min=1)
    lr: float = key(1e-2, "fit_one_cycle's learning rate", above=0)
    seed: int = key(42, "data split and weights", min=0, max=2**32 - 1)
    repeat: int = key(0, "a label for repeats of one point: -m repeat=range(5) measures a race rate", min=0)
    expect: Optional[str] = key(None, "exit 1 unless the verdict is this",
                                choices=["clean", "race", "save_failed", "error"])
    device: str = key("auto", "auto: cuda when at least world_size GPUs are visible, else cpu",
                      choices=["auto", "cpu", "cuda"])
    backend: str = key("auto", "auto: nccl on cuda, gloo on cpu", choices=["auto", "gloo", "nccl"])
    needs: List[str] = key([], "what a scenario needs of a framework besides its workload (set by each scenario): "
                               "capabilities from train/frameworks/base.py's CAPABILITIES; where the framework "
                               "has none, the cell is n/a with the framework's one-line why")
    not_for: Dict[str, str] = key({}, "fixes a scenario does not apply to that no rule derives, each with the "
                                      "reason (set by scenarios); <workload>/<fix> for one workload only")
    reproduces: Dict[str, List[str]] = key({}, "the public reports a scenario reproduces (repo#number), per framework "
                                               "they are about; all: those about every framework, torch's own "
                                               "among them (set by each scenario; each framework's matrix cites "
                                               "its own and all's)")
    skew: SkewConfig = group(SkewConfig, "who is late at the last save, and how")
    fault: FaultConfig = group(FaultConfig, "faults placed on purpose at named points (train/faults.py)")
    checkpoint: CheckpointConfig = group(CheckpointConfig, "the file under test")
    timeout: TimeoutConfig = group(TimeoutConfig, "no wait lasts longer")
    launch: LaunchConfig = group(LaunchConfig, "how the ranks start")
    rdzv: RdzvConfig = group(RdzvConfig, "where the ranks meet")
    check: CheckConfig = group(CheckConfig, "race-lab check: your setup, which narrows the scenarios, and how often "
                                            "each runs")
    framework: FrameworkConfig = group(FrameworkConfig, "the framework under test (a config group)")
    fix: FixConfig = field(default_factory=FixConfig, metadata={"doc": "the fix: how the ranks sync (a config group)"})
    data: Any = field(default="???", metadata={"doc": "the data set (a config group)"})  # ???: set by the group


CONFIGS = Path(__file__).resolve().parents[1] / "configs"  # the Hydra config folder, beside train/


def register():
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    for name, cls in DATA.items():
        cs.store(group="data", name=name, node=cls)


register()


# --- checking values ------------------------------------------------------------------------------------

class ConfigError(ValueError):
    """A bad value; its text is one line that names the key and the value."""


def _kind(tp):
    """(python types accepted, words for the message, element type for lists and value type for mappings)."""
    if get_origin(tp) is list:
        return list, "a list", get_args(tp)[0]
    if get_origin(tp) is dict:
        return dict, "a mapping", get_args(tp)[1]  # of keys (strings) to values of this type
    args = [a for a in get_args(tp) if a is not type(None)]
    base = args[0] if args else tp
    return {int: (int, "an integer", None), float: ((int, float), "a finite number", None),
            str: (str, "a string", None), bool: (bool, "true or false", None)}[base]


def describe(meta: dict, tp) -> str:
    """'must be ...' for a key, from its schema entry."""
    _, words, item = _kind(tp)
    if get_origin(tp) is dict:
        text = words if item in (str, Any) else f"{words} to {_kind(item)[1].removeprefix('a ')}s of strings"
    elif meta.get("choices"):
        text = ("a list, each one of " if item is not None else "one of ") + ", ".join(meta["choices"])
    else:
        if item is not None:
            words = f"a list of {_kind(item)[1].removeprefix('an ').removeprefix('a ')}s"
        bounds = [f">= {meta['min']}" if meta.get("min") is not None else "",
                  f"> {meta['above']}" if meta.get("above") is not None else "",
                  f"<= {meta['max']}" if meta.get("max") is not None else ""]
        text = " ".join([words, " and ".join(b for b in bounds if b)]).strip()
    optional = type(None) in get_args(tp)
    return ("null or " if optional else "") + text


def _ok_scalar(value, tp, meta) -> bool:
    accepted = _kind(tp)[0]
    if isinstance(value, bool) and accepted is not bool:
        return False
    if not isinstance(value, accepted):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if meta.get("choices") and value not in meta["choices"]:
        return False
    if meta.get("min") is not None and value < meta["min"]:
        return False
    if meta.get("above") is not None and value <= meta["above"]:
        return False
    return meta.get("max") is None or value <= meta["max"]


def _check_value(path, value, tp, meta):
    if value is None and type(None) in get_args(tp):
        return
    accepted, _, item = _kind(tp)
    if accepted is list:
        ok = isinstance(value, list) and (value or meta.get("may_be_empty")) and all(_ok_scalar(v, item, meta)
                                                                                   for v in value)
    elif accepted is dict:  # a string to each key (not_for), or a list of strings (reproduces)
        ok = isinstance(value, dict) and all(
            isinstance(k, str) and (item is Any or isinstance(v, str) if item in (str, Any) else
                                    isinstance(v, list) and all(isinstance(x, str) for x in v))
            for k, v in value.items())
    else:
        ok = _ok_scalar(value, tp, meta)
    if not ok:
        raise ConfigError(f"{path}={value!r}: must be {describe(meta, tp)}")


def check(cfg: dict, schema=TrainConfig, prefix="") -> None:
    """Raise ConfigError for the first value outside its declared range (types included)."""
    for f in fields(schema):
        path = prefix + f.name
        if f.name not in cfg:
            raise ConfigError(f"{path}: missing")
        value = cfg[f.name]
        if f.name == "data":
            if not isinstance(value, dict) or value.get("name") not in DATA:
                raise ConfigError(f"data={value!r}: must be one of {', '.join(DATA)}")
            check(value, DATA[value["name"]], "data.")
        elif is_dataclass(f.type):
            check(value, f.type, path + ".")
        elif f.name not in ("name", "_target_") or schema is not FixConfig:
            _check_value(path, value, f.type, f.metadata)
    unknown = sorted(set(cfg) - {f.name for f in fields(schema)})
    if unknown:
        raise ConfigError(f"{prefix}{unknown[0]}: not a key of this config")


def lookup(dotted: str):
    """The schema entry (field) of a dotted key, e.g. 'skew.seconds', or None."""
    head, _, rest = dotted.partition(".")
    if head == "data":  # the group's options share their keys' meaning
        return next((f for cls in DATA.values() for f in fields(cls) if f.name == rest), None)
    schema, entry = TrainConfig, None
    for part in dotted.split("."):
        if schema is None or not is_dataclass(schema):
            return None
        entry = next((f for f in fields(schema) if f.name == part), None)
        if entry is None:
            return None
        schema = entry.type if is_dataclass(entry.type) else None
    return entry


def _default_text(f) -> str:
    default = f.default_factory() if f.default_factory is not MISSING else f.default
    if default is MISSING:
        return "(group)"
    if default is None:
        return "null"
    if isinstance(default, bool):
        return str(default).lower()
    return f"`{default}`" if isinstance(default, str) else str(default)


def rows(schema=TrainConfig, prefix="", note=""):
    for f in fields(schema):
        if schema is TrainConfig and f.name == "data" or schema is FixConfig and f.name == "name":
            continue  # set by their groups
        if is_dataclass(f.type):
            yield from rows(f.type, prefix + f.name + ".")
            continue
        meta = f.metadata
        plain_string = meta.get("choices") is None and _kind(f.type)[1] == "a string"
        allowed = "" if plain_string or f.name == "name" else f" ({describe(meta, f.type)})"
        yield f"| `{prefix}{f.name}` | {_default_text(f)} | {note}{meta['doc']}{allowed} |"
    if schema is TrainConfig:
        for name, cls in DATA.items():
            yield from rows(cls, "data.", note=f"data={name}: ")


def markdown_table() -> str:
    lines = ["| key | default | meaning (allowed values) |", "| --- | --- | --- |", *rows()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown_table())
