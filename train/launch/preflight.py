"""The checks before any rank starts (one line and exit 2 for what cannot work), and the moment a run dir is claimed: from then on errors are the run's, not the input's."""
import os
import shutil
import tempfile
import threading
import urllib.request
from pathlib import Path

from train.config import ConfigError, lookup
from train.launch import nodes
from train.launch.own_class import check_kwargs, check_own_class
from train.launch.plan import make_plan, the_framework

EXIT_EXPECT_MISMATCH, EXIT_BAD_CONFIG, EXIT_HARNESS, EXIT_INTERRUPTED = 1, 2, 3, 130
_started = threading.Event()  # set once a run dir is claimed: from then on errors are the run's, not the input's


def started() -> bool:
    return _started.is_set()


def first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:300] if lines else ""


def discard_run_dir(run_dir: Path):
    """Remove what Hydra created for a run that never started; leave anything else alone."""
    shutil.rmtree(run_dir / ".hydra", ignore_errors=True)
    for d in (run_dir, *run_dir.parents):  # and its parents that are now empty, up to the working dir
        if d == Path.cwd() or not d.exists() or any(d.iterdir()):
            break
        try:
            d.rmdir()
        except OSError:  # a folder whose parent is not ours to change (another user's): it stays
            break


def check_data_reachable(data: dict):
    """A data set that needs a download must be reachable before any rank starts."""
    try:
        if "url" not in data or Path(data["cache"]).expanduser().exists():
            return
    except (ValueError, OSError, RuntimeError) as e:  # a NUL byte, ~user that does not exist
        raise ConfigError(f"data.cache={data['cache']!r}: not a usable path ({e})") from None
    try:
        urllib.request.urlopen(urllib.request.Request(data["url"], method="HEAD"), timeout=10).close()
    except (OSError, ValueError) as e:
        why = getattr(e, "reason", e)
        raise ConfigError(f"data.url={data['url']!r}: cannot download {data['name']} ({why}); "
                          "data=digits works offline") from None


def preflight(cfg: dict, machine, reach_data: bool = True, given=()):
    """Every check of a resolved config before any rank starts: the schema's ranges, the rules across keys
    and the machine (train/launch/plan.py), a key given (`given`: the command line's overrides) that this run
    would ignore, limits that contradict each other, the checkpoint folder, the node disks, a class of your own,
    the data. Returns the plan; raises ConfigError with one line. checkpoint.dir becomes absolute."""
    try:
        cfg["checkpoint"]["dir"] = str(Path(cfg["checkpoint"]["dir"]).resolve())
    except (ValueError, OSError, TypeError) as e:  # a NUL byte, a path the OS refuses, not a string
        raise ConfigError(f"checkpoint.dir={cfg['checkpoint']['dir']!r}: not a usable path ({e})") from None
    plan = make_plan(cfg, machine)
    check_used(cfg, given)
    check_limits(cfg)
    if cfg["checkpoint"]["keep_existing"]:  # a folder to read what is there (it may be read-only: saves then fail)
        check_folder_readable("checkpoint.dir", Path(cfg["checkpoint"]["dir"]))
    else:
        check_folder_writable("checkpoint.dir", Path(cfg["checkpoint"]["dir"]))
    nodes.node_disk_form(cfg)  # launch.node_disks=mount on a machine that cannot: refused here
    check_kwargs(cfg)
    if cfg["fix"]["name"] == "own":
        check_own_class(cfg)
    if reach_data:
        check_data_reachable(cfg["data"])
    return plan


def value_of(cfg: dict, dotted: str):
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def given_keys(overrides) -> list:
    """The dotted keys a command line's overrides set (`key=v`, `+key=v`, `++key=v`), groups included."""
    return [o.partition("=")[0].lstrip("+~") for o in overrides if "=" in o]


def check_used(cfg: dict, given) -> None:
    """A key the user set that this run would ignore (its schema entry's `needs` the capabilities a framework must
    provide to read it, its `only` the runs that read it) is refused: a run that silently drops what was asked for
    answers another question."""
    for dotted in given_keys(given):
        entry = lookup(dotted)
        only = entry.metadata.get("only") if entry is not None else None
        needs = entry.metadata.get("needs", ()) if entry is not None else ()
        framework = the_framework(cfg) if needs else None
        if framework is not None and not any(need in framework.provides for need in needs):
            raise ConfigError(f"{dotted}={value_of(cfg, dotted)!r}: read only by a framework with "
                              f"{' or '.join(needs)}; this run has framework={framework.name}, which ignores it: "
                              f"{framework.why_lacking(needs[0])}")
        for other, values in (only or {}).items():
            actual = value_of(cfg, other)
            if actual not in values:
                label = other.removesuffix(".name")  # fix.name=own is typed fix=own
                wanted = " or ".join(f"{label}={str(v).lower() if isinstance(v, bool) else v}" for v in values)
                shown = str(actual).lower() if isinstance(actual, bool) else actual
                raise ConfigError(f"{dotted}={value_of(cfg, dotted)!r}: read only with {wanted}; this run has "
                                  f"{label}={shown}, which ignores it")


def check_limits(cfg: dict) -> None:
    """Limits that contradict each other: a stall that cannot end within the run's time limit, a crash planted
    in an epoch the run never reaches or at a point its framework never gets to."""
    run_s = cfg["timeout"]["run_s"]
    stalls = (("skew.seconds", cfg["skew"]["seconds"] + cfg["skew"]["mid_write_s"]),
              ("fault.read_delay_s", cfg["fault"]["read_delay_s"]))
    for name, seconds in stalls:
        if seconds >= run_s:
            given = cfg["skew"]["seconds"] if name == "skew.seconds" else seconds
            with_mid = f" (with skew.mid_write_s, {seconds:g} s)" if name == "skew.seconds" and \
                cfg["skew"]["mid_write_s"] else ""
            raise ConfigError(f"{name}={given!r}: the stall{with_mid} cannot end within timeout.run_s={run_s:g}; "
                              "raise timeout.run_s above it")
    kill, epochs = cfg["fault"]["kill_epoch"], cfg["epochs"]
    if kill is not None and kill >= epochs:
        raise ConfigError(f"fault.kill_epoch={kill}: the run has epochs={epochs} (0..{epochs - 1}), so the planted "
                          "crash would never happen")
    framework = cfg["framework"]["name"]
    if kill is not None and cfg["fault"]["kill_at"] == "before_shard" and \
            "sharded_state" not in the_framework(cfg).provides:
        raise ConfigError(f"fault.kill_at=before_shard: only a framework with sharded_state writes a shard on every "
                          f"rank; framework={framework} never gets there, so the planted crash would never happen "
                          "(mid_write or after_save)")
    async_fault = cfg["fault"]["async_fault"] if cfg["checkpoint"]["async_save"] else None
    theirs = "lightning" if async_fault == "slow_write" else "torch_loop"
    if async_fault and framework != theirs:
        raise ConfigError(f"fault.async_fault={async_fault}: only framework={theirs} has that point; "
                          f"framework={framework} never gets there, so the planted fault would never happen")


def existing(key: str, folder: Path) -> Path:
    """The deepest of the folder and its parents that is there; a path the OS will not look up (a part longer than
    its limit) is refused in the OS's words."""
    try:
        return next(p for p in (folder, *folder.parents) if p.exists())
    except OSError as e:
        raise ConfigError(f"{key}={str(folder)!r}: {e.strerror or e}") from None


def check_folder_writable(key: str, folder: Path):
    """A folder the run will write (creating it if need be): made and written to once here, with what this made
    removed again, so that a folder that cannot be created (under /proc, in a read-only mount) is refused now,
    not taken for a failed save later."""
    found = existing(key, folder)
    if not found.is_dir():
        raise ConfigError(f"{key}={str(folder)!r}: {found} is a file, not a folder")
    if not os.access(found, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}={str(folder)!r}: cannot write in {found}")
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):  # nameless (O_TMPFILE), or its random name unlinked at once
            pass
    except OSError as e:
        raise ConfigError(f"{key}={str(folder)!r}: cannot create or write it ({e.strerror or e})") from None
    finally:
        for p in made:
            try:
                p.rmdir()
            except OSError:
                break


def check_folder_readable(key: str, folder: Path):
    """A folder whose checkpoint the run reads (checkpoint.keep_existing): it must be a folder, or not be there."""
    found = existing(key, folder)
    if found == folder and not folder.is_dir():
        raise ConfigError(f"{key}={str(folder)!r}: a file, not a folder")
    if not found.is_dir():
        raise ConfigError(f"{key}={str(folder)!r}: {found} is a file, not a folder")


def check_writable(run_dir: Path):
    """The run dir (Hydra made it) must take our files; say so in one line, not a traceback later. The probe
    is a temporary file, nameless or of a random name: the node launchers of launch.all_nodes_here share one run
    dir and probe it at once."""
    try:
        with tempfile.TemporaryFile(dir=run_dir):
            pass
    except OSError as e:
        raise ConfigError(f"hydra.run.dir={run_dir}: cannot write there ({e.strerror})") from None
