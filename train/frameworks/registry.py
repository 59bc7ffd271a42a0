"""Which frameworks there are: every Framework subclass registered under the entry-point group `race_lab.frameworks`.

race-lab's own register in pyproject.toml; a package of yours registers the same way, in its own pyproject.toml:

    [project.entry-points."race_lab.frameworks"]
    inhouse = "mytrainer.race_lab:InHouse"

and, once installed (or on PYTHONPATH with its dist-info), `race-lab check framework=inhouse` runs it. Loading an
entry imports only the contract's module, never the framework (base.py). A framework with no file in
configs/framework/ gets its config group option from its contract (register_configs).
"""

import functools
import tomllib
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from train.frameworks.base import Framework

GROUP = "race_lab.frameworks"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"  # race-lab's own, where it runs from a checkout


class NotAFramework(ValueError):
    """An entry point that does not load, or loads something that is no Framework; its text is one line."""


@functools.lru_cache(maxsize=None)
def frameworks() -> dict[str, EntryPoint]:
    """Every registered framework by name, race-lab's own first, then the others by name."""
    found: dict[str, EntryPoint] = {}
    points = [*entry_points(group=GROUP), *own_entry_points()]
    for point in sorted(points, key=lambda p: (not p.value.startswith("train."), p.name)):
        if point.name not in found:  # the same package on sys.path twice (an editable install) lists it twice
            found[point.name] = point
    return found


def own_entry_points() -> list[EntryPoint]:
    """race-lab's own frameworks as its pyproject.toml registers them, for a checkout that is not installed as a
    package (the container image runs python -m train from /app): the same declaration, read as data."""
    try:
        declared = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"][GROUP]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return []
    return [EntryPoint(name, value, GROUP) for name, value in declared.items()]


def names() -> list[str]:
    return list(frameworks())


@functools.lru_cache(maxsize=None)
def get(name: str) -> type[Framework]:
    """The framework registered as `name`; NotAFramework when none is, or it is broken."""
    point = frameworks().get(name)
    if point is None:
        raise NotAFramework(
            f"framework={name}: none is registered under the entry points {GROUP!r} (these are: {', '.join(names())})"
        )
    try:
        found = point.load()
    except Exception as e:  # a package of yours that does not import
        raise NotAFramework(
            f"framework={name}: its entry point {point.value} does not load "
            f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})"
        ) from e
    if not (isinstance(found, type) and issubclass(found, Framework)):
        raise NotAFramework(
            f"framework={name}: its entry point {point.value} is no subclass of train.frameworks.base.Framework"
        )
    problems = found.problems() or (
        [] if found.name == name else [f"it is registered as {name!r} but names itself {found.name!r}"]
    )
    if problems:
        raise NotAFramework(f"framework={name}: " + "; ".join(problems))
    return found


def register_configs(configs: Path) -> None:
    """Give every registered framework that has no file in configs/framework/ its option of Hydra's `framework`
    group: its name and its contract's `config`, so that `framework=<its name>` composes."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name in names():
        if not (configs / "framework" / f"{name}.yaml").is_file():
            try:
                config = get(name).config
            except NotAFramework:  # said, in one line, by the checks before any rank starts
                config = {}
            store.store(group="framework", name=name, node={**config, "framework": {"name": name}}, package="_global_")
