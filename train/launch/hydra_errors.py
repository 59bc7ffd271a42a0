"""One line for each way a command line can be wrong before any rank starts (Hydra's own errors
span several lines and exit 1)."""
import re
from dataclasses import is_dataclass

from hydra.errors import (
    ConfigCompositionException,
    MissingConfigException,
    OverrideParseException,
)
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from train.config import ConfigError, describe, lookup


def config_error_line(e: BaseException):
    """The line for a composition error or an unusable run dir; None for anything else."""
    cause = e.__cause__
    if isinstance(e, ConfigError):  # from a launcher's setup (no Ray cluster to join), before any job
        return str(e)
    if isinstance(e, MissingConfigException) and e.missing_cfg_file and "/" in e.missing_cfg_file:
        group, option = e.missing_cfg_file.rsplit("/", 1)
        return f"{group}={option}: no such option; one of {', '.join(e.options or [])}"
    if isinstance(e, OverrideParseException):
        return f"cannot parse the override: {str(e).splitlines()[0]}"
    if isinstance(e, ConfigCompositionException) and isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        return f"{cause.full_key}: not a key of this config (python -m train.config lists them)"
    if isinstance(e, ConfigCompositionException) and isinstance(cause, ValidationError):
        given = re.search(r"override \S+?=(.*)$", str(e))
        value = given.group(1) if given else "?"
        entry = lookup(cause.full_key)
        if entry is None or is_dataclass(entry.type):
            return f"{cause.full_key}={value}: {cause.full_key} is a group of keys; set them one by one"
        return f"{cause.full_key}={value}: must be {describe(entry.metadata, entry.type)}"
    if isinstance(e, (ConfigCompositionException, MissingConfigException)):
        return str(e).splitlines()[0]
    if isinstance(e, OSError) and e.filename:  # Hydra could not create or write the run dir
        return f"hydra.run.dir: cannot write {e.filename}: {e.strerror}"
    return None
