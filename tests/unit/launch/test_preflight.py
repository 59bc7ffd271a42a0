"""train/launch/preflight.py's refusals, in this process on composed configs and hand-made folders: each says one
line naming the key and why (a stall that outlasts the run, a crash the run never reaches, a key the run ignores, a
folder that cannot be written or read, data that cannot be fetched), and what is fine passes (issue 43: its rules
in make mutants' scope). The real command's exit 2 is tests/e2e/test_refusals.py's."""
import os

import pytest

from helpers.compose import changed, composed
from train.config import ConfigError
from train.launch import preflight as pf
from train.launch.plan import this_machine


def refused(check, *args) -> str:
    with pytest.raises(ConfigError) as e:
        check(*args)
    return str(e.value)


def with_(cfg, **dotted):
    """cfg with each key set, its parts joined by __ (skew__seconds: skew.seconds)."""
    return changed(cfg, {key.replace("__", "."): value for key, value in dotted.items()})


def test_a_stall_that_cannot_end_within_the_run_time_limit_is_refused_naming_the_key():
    cfg = composed()
    run_s = cfg["timeout"]["run_s"]
    pf.check_limits(with_(composed(), skew__seconds=run_s - 1))  # ends in time
    assert refused(pf.check_limits, with_(composed(), skew__seconds=run_s)) == (
        f"skew.seconds={float(run_s)!r}: the stall cannot end within timeout.run_s={run_s:g}; raise timeout.run_s "
        "above it")
    both = with_(composed(), skew__seconds=run_s - 1, skew__mid_write_s=1.0)
    assert refused(pf.check_limits, both).startswith(
        f"skew.seconds={float(run_s - 1)!r}: the stall (with skew.mid_write_s, {run_s:g} s) cannot end")
    assert refused(pf.check_limits, with_(composed(), fault__read_delay_s=run_s)).startswith(
        f"fault.read_delay_s={run_s!r}: the stall cannot end within")


def test_a_crash_the_run_never_reaches_is_refused():
    epochs = composed()["epochs"]
    pf.check_limits(with_(composed(), fault__kill_epoch=epochs - 1))
    assert refused(pf.check_limits, with_(composed(), fault__kill_epoch=epochs)) == (
        f"fault.kill_epoch={epochs}: the run has epochs={epochs} (0..{epochs - 1}), so the planted crash would never "
        "happen")
    shard = with_(composed(), fault__kill_epoch=0, fault__kill_at="before_shard")
    assert refused(pf.check_limits, shard).startswith(
        "fault.kill_at=before_shard: only a framework with sharded_state writes")
    pf.check_limits(with_(shard, framework__name="deepspeed"))
    pf.check_limits(with_(shard, framework__name="ray_train"))  # its contract provides sharded_state too
    pf.check_limits(with_(composed(), fault__kill_at="before_shard"))  # no kill planted: nothing to refuse


def test_an_async_fault_of_another_framework_is_refused_and_ignored_without_async_saves():
    cfg = with_(composed(), checkpoint__async_save=True, fault__async_fault="overlap")
    assert refused(pf.check_limits, cfg) == ("fault.async_fault=overlap: only framework=torch_loop has that point; "
                                            "framework=fastai never gets there, so the planted fault would never "
                                            "happen")
    pf.check_limits(with_(cfg, framework__name="torch_loop"))
    slow = with_(composed(), checkpoint__async_save=True, fault__async_fault="slow_write", framework__name="torch_loop")
    assert "only framework=lightning has that point" in refused(pf.check_limits, slow)
    pf.check_limits(with_(slow, framework__name="lightning"))
    pf.check_limits(with_(composed(), fault__async_fault="overlap"))  # no async saves: not read


def test_a_key_given_that_this_run_ignores_is_refused_and_one_it_reads_is_not():
    assert pf.given_keys(["skew.mid_write_s=1", "+fault.x=2", "++a.b=3", "~c=4", "scenario"]) == \
        ["skew.mid_write_s", "fault.x", "a.b", "c"]
    resume = with_(composed(), workload="resume")
    assert refused(pf.check_used, resume, ["skew.mid_write_s=1"]) == (
        "skew.mid_write_s=0.0: read only with workload=load_best; this run has workload=resume, which ignores it")
    pf.check_used(composed(), ["skew.mid_write_s=1", "not.a.key=1", "seed=3"])
    assert pf.value_of(composed(), "skew.mid_write_s") == 0.0


def test_a_checkpoint_folder_that_cannot_be_written_or_read_is_refused(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert refused(pf.check_folder_writable, "checkpoint.dir", a_file / "m") == (
        f"checkpoint.dir={str(a_file / 'm')!r}: {a_file} is a file, not a folder")
    made = tmp_path / "new" / "deeper"
    pf.check_folder_writable("checkpoint.dir", made)
    assert not (tmp_path / "new").exists()  # what the probe made is gone again
    pf.check_folder_writable("checkpoint.dir", tmp_path)
    assert list(tmp_path.iterdir()) == [a_file]
    assert refused(pf.check_folder_readable, "checkpoint.dir", a_file) == \
        f"checkpoint.dir={str(a_file)!r}: a file, not a folder"
    assert refused(pf.check_folder_readable, "checkpoint.dir", a_file / "m") == \
        f"checkpoint.dir={str(a_file / 'm')!r}: {a_file} is a file, not a folder"
    pf.check_folder_readable("checkpoint.dir", tmp_path / "not" / "there")
    if os.geteuid() != 0:  # root writes anywhere
        (tmp_path / "ro").mkdir(mode=0o500)
        assert "cannot write in" in refused(pf.check_folder_writable, "checkpoint.dir", tmp_path / "ro" / "m")
    assert "cannot create or write it" in refused(pf.check_folder_writable, "checkpoint.dir",
                                                  tmp_path.joinpath("/proc/race-lab/m"))


def test_the_run_dir_must_take_files_and_a_run_that_never_started_leaves_only_what_is_not_hydras(tmp_path,
                                                                                                 monkeypatch):
    pf.check_writable(tmp_path)
    assert "cannot write there" in refused(pf.check_writable, tmp_path / "missing")
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "day" / "run1"
    (run / ".hydra").mkdir(parents=True)
    pf.discard_run_dir(run)
    assert list(tmp_path.iterdir()) == []  # its empty parents too, up to the working dir
    (run / ".hydra").mkdir(parents=True)
    (run / "theirs.txt").write_text("x")
    pf.discard_run_dir(run)
    assert [p.name for p in run.iterdir()] == ["theirs.txt"]


def test_data_that_needs_a_download_must_be_reachable(tmp_path):
    pf.check_data_reachable({"name": "digits"})  # in the package
    pf.check_data_reachable({"name": "mnist", "url": "http://127.0.0.1:9/x", "cache": str(tmp_path)})  # cached
    line = refused(pf.check_data_reachable, {"name": "mnist", "url": "http://127.0.0.1:9/x",
                                            "cache": str(tmp_path / "none")})
    assert line.startswith("data.url='http://127.0.0.1:9/x': cannot download mnist (") and \
        line.endswith("); data=digits works offline")
    assert refused(pf.check_data_reachable, {"name": "mnist", "url": "x", "cache": "~no-such-user-43/d"}).startswith(
        "data.cache='~no-such-user-43/d': not a usable path (")


def test_preflight_makes_the_folder_absolute_and_refuses_a_path_the_os_cannot_take(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = with_(composed(), checkpoint__dir="m")
    pf.preflight(cfg, this_machine(), reach_data=False)
    assert cfg["checkpoint"]["dir"] == str(tmp_path / "m")
    kept = with_(composed(), checkpoint__dir=str(tmp_path / "f"), checkpoint__keep_existing=True)
    (tmp_path / "f").write_text("x")
    assert refused(pf.preflight, kept, this_machine(), False).endswith(": a file, not a folder")
    assert refused(pf.preflight, with_(composed(), checkpoint__dir="a\0b"), this_machine(), False).startswith(
        "checkpoint.dir='a\\x00b': not a usable path (")
    assert pf.first_line(ValueError("\n first\nsecond")) == "first" and pf.first_line(ValueError()) == ""
    assert pf.started() is pf._started.is_set()
