"""What `make bench` relies on, checked without timing anything: speed goals live in the benchmark."""
import pytest

from train.bench import launcher_imports_fastai
from train.early import forkserver_wanted


def test_the_launcher_imports_no_fastai():
    assert launcher_imports_fastai() is False


@pytest.mark.parametrize("argv, wanted", [
    ([], True),
    (["-m", "skew.seconds=3", "repeat=range(10)"], True),
    (["launch.start_method=forkserver"], True),
    (["launch.start_method=spawn"], False),
    (["-m", "launch.start_method=spawn,forkserver"], False),
    (["scenario=no_shared_fs"], False),  # its config starts every node's launcher on this host
    (["scenario=torn"], True),
    (["launch.all_nodes_here=true", "nnodes=2"], False),
    (["-m", "hydra/launcher=slurm"], False),
    (["--cfg", "job"], False),
    (["--help"], False),
])
def test_the_forkserver_starts_early_only_when_the_command_line_allows(argv, wanted):
    assert forkserver_wanted(argv) is wanted
