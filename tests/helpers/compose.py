"""The config `python -m train` would run, composed by Hydra as plain data; nothing is launched."""
import copy
import functools

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import ROOT


def composed(*overrides) -> dict:
    """The config `python -m train` would run, as plain data (nothing is launched); a fresh copy each time."""
    return copy.deepcopy(_composed(overrides))


@functools.lru_cache(maxsize=None)
def _composed(overrides: tuple) -> dict:
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=list(overrides), return_hydra_config=True)
    out = OmegaConf.to_container(cfg, resolve=False)
    out.pop("hydra")
    out["checkpoint"]["dir"] = "/tmp/models"
    return out


def base_cfg(*overrides, **changes):
    """The composed config (with these command-line overrides), then each dotted key set to its value."""
    return changed(composed(*overrides), changes)


def changed(cfg: dict, changes: dict) -> dict:
    """cfg with each dotted key of `changes` set to its value (in place), returned."""
    for dotted, value in changes.items():
        node = cfg
        *path, last = dotted.split(".")
        for key in path:
            node = node[key]
        node[last] = value
    return cfg
