"""Bad configs are rejected before any rank starts; device/backend choice."""
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT
from train.plan import ConfigError, make_plan


def base_cfg(**changes):
    cfg = yaml.safe_load((ROOT / "configs/train.yaml").read_text())
    cfg.pop("defaults"), cfg.pop("hydra")
    for dotted, value in changes.items():
        node = cfg
        *path, last = dotted.split(".")
        for key in path:
            node = node[key]
        node[last] = value
    return cfg


def test_auto_picks_cpu_gloo_without_enough_gpus_and_nccl_with():
    plan = make_plan(base_cfg(), gpu_count=2)
    assert (plan.device, plan.backend) == ("cpu", "gloo")
    assert "2 GPU(s) visible for 3 rank(s)" in plan.reason
    plan = make_plan(base_cfg(), gpu_count=3)
    assert (plan.device, plan.backend) == ("cuda", "nccl")


@pytest.mark.parametrize("changes, gpus, message", [
    ({"world_size": 0}, 0, "world_size=0: must be an integer >= 1"),
    ({"skew.rank": 3}, 0, "skew.rank=3: must be a rank in 0..2"),
    ({"skew.seconds": -1.0}, 0, "skew.seconds=-1.0"),
    ({"epochs": -2}, 0, "epochs=-2"),
    ({"backend": "nccl"}, 2, "backend='nccl': needs one GPU per rank: 3 ranks, 2 GPU(s) visible"),
    ({"device": "cuda"}, 0, "device='cuda': needs one GPU per rank: 3 ranks, 0 GPU(s) visible"),
    ({"device": "cpu", "backend": "nccl"}, 4, "backend='nccl': needs device=cuda"),
    ({"crash_rank": 7}, 0, "crash_rank=7"),
    ({"timeout.collective_s": 0}, 0, "timeout.collective_s=0"),
    ({"launch.start_method": "fork"}, 0, "launch.start_method='fork': must be spawn or forkserver"),
])
def test_plan_rejects_bad_values_naming_key_and_value(changes, gpus, message):
    with pytest.raises(ConfigError) as e:
        make_plan(base_cfg(**changes), gpu_count=gpus)
    assert message in str(e.value)


@pytest.mark.parametrize("override, expected", [
    ("world_size=0", "error: world_size=0: must be an integer >= 1"),
    ("skew.rank=5", "error: skew.rank=5: must be a rank in 0..2 (world_size=3)"),
    ("skew.seconds=-1", "error: skew.seconds=-1: must be a number >= 0"),
    ("epochs=-1", "error: epochs=-1: must be an integer >= 1 (the last epoch saves)"),
    ("backend=nccl", "error: backend='nccl': needs one GPU per rank: 3 ranks, 0 GPU(s) visible"),
])
def test_cli_rejects_bad_config_with_one_line_before_any_rank(tmp_path, override, expected):
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "train", f"hydra.run.dir={run_dir}", override],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [expected]
    assert not run_dir.exists(), "nothing may be left where a result would be"


def test_unknown_callback_gets_hydras_error_listing_the_options(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "train", f"hydra.run.dir={tmp_path / 'run'}", "callback=nope"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "Could not find 'callback/nope'" in proc.stderr
    assert "barrier" in proc.stderr and "unsynced" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_data_that_cannot_be_downloaded_fails_with_one_line_before_any_rank(tmp_path):
    url = "http://127.0.0.1:9/mnist_sample.tgz"  # loopback, nothing listens: the download cannot happen
    proc = subprocess.run([sys.executable, "-m", "train", f"hydra.run.dir={tmp_path / 'run'}", "data=mnist_sample",
                           f"data.url={url}", f"data.cache={tmp_path / 'no-cache'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: data.url='{url}': cannot download mnist_sample (")
    assert line.endswith("data=digits works offline")
    assert not (tmp_path / "run").exists()
