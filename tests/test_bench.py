"""What `make bench` relies on, checked without timing anything: speed goals live in the benchmark."""
import pytest

from train.bench.measure import FRAMEWORK_MODULES, launcher_imports
from train.launch.forkserver import adapters_named, forkserver_wanted, preload_list


def test_the_launcher_imports_no_framework():
    assert launcher_imports(FRAMEWORK_MODULES) is False
    assert launcher_imports(("torch",)) is True  # the check sees what the launcher does import


@pytest.mark.parametrize("argv, preloaded", [
    ([], ["train.rank.preload", "train.frameworks.fastai"]),
    (["framework=lightning"], ["train.rank.preload", "train.frameworks.lightning"]),
    (["-m", "framework=transformers,accelerate"], ["train.rank.preload", "train.frameworks.transformers",
                                                    "train.frameworks.accelerate"]),
    (["framework=nope"], ["train.rank.preload"]),  # the config's error to report, later
])
def test_the_forkserver_preloads_only_the_frameworks_the_command_line_names(argv, preloaded):
    assert preload_list(adapters_named(argv)) == preloaded


@pytest.mark.parametrize("argv, wanted", [
    ([], True),
    (["-m", "skew.seconds=3", "repeat=range(10)"], True),
    (["launch.start_method=forkserver"], True),
    (["launch.start_method=spawn"], False),
    (["-m", "launch.start_method=spawn,forkserver"], False),
    (["scenario=no_shared_fs"], True),  # every node's agent on this host forks from it
    (["scenario=torn"], True),
    (["launch.all_nodes_here=true", "nnodes=2"], True),
    (["-m", "hydra/launcher=slurm"], False),
    (["--cfg", "job"], False),
    (["--help"], False),
])
def test_the_forkserver_starts_early_only_when_the_command_line_allows(argv, wanted):
    assert forkserver_wanted(argv) is wanted
