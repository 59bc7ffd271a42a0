"""A folder of its own for every run, sweep, matrix and check, whatever starts beside it in the same second from
the same folder (parallel CI jobs in one workspace): the default names end in the second they started, so the
folder is made by mkdir, which either makes it or fails, and a name taken is followed by -2, -3, ...

configs/train.yaml's default run and sweep dirs, and make's sweep and matrix dirs, go through the `fresh`
resolver: `${fresh:runs/multirun/${now:...}}`. Hydra resolves a dir more than once, so within one process a name
always gives the folder it gave first; a sweep's jobs, in their workers, get it from the config's resolver cache,
which Hydra copies into each job's config (as it does for `now`)."""
from pathlib import Path

from omegaconf import OmegaConf

RESOLVER = "fresh"
_given: dict = {}  # name -> the folder made for it in this process


def fresh_folder(base: Path) -> Path:
    """A new folder named base, or base-2, base-3, ...: made by this process alone."""
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        folder = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(f"{base}: 9999 folders of that name already")


def fresh(name: str) -> str:
    """The resolver: a folder made for `name` (the same one each time this process asks)."""
    if name not in _given:
        _given[name] = str(fresh_folder(Path(name)))
    return _given[name]


def register():
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, fresh, use_cache=True)
