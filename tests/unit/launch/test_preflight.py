"""train/launch/preflight.py's refusals, in this process on composed configs and hand-made folders: each says one
line naming the key and why (a stall that outlasts the run, a crash the run never reaches, a key the run ignores, a
folder that cannot be written or read, data that cannot be fetched), and what is fine passes (issue 43: its rules
in make mutants' scope). The real command's exit 2 is tests/e2e/test_refusals.py's."""
import http.server
import os
import tempfile
import threading
import urllib.request
import urllib.response

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
    with pytest.raises(OSError) as os_says:  # what this OS answers to a folder made under /proc
        os.mkdir("/proc/race-lab")
    assert refused(pf.check_folder_writable, "checkpoint.dir", tmp_path.joinpath("/proc/race-lab/m")) == (
        f"checkpoint.dir='/proc/race-lab/m': cannot create or write it ({os_says.value.strerror})")


def test_a_checkpoint_folder_whose_name_the_os_will_not_look_up_is_refused_in_its_words(tmp_path):
    too_long = tmp_path / ("m" * 300) / "best"  # a part longer than the 255 bytes a Linux file name may have
    with pytest.raises(OSError) as os_says:
        too_long.exists()
    line = f"checkpoint.dir={str(too_long)!r}: {os_says.value.strerror}"
    assert refused(pf.check_folder_writable, "checkpoint.dir", too_long) == line
    assert refused(pf.check_folder_readable, "checkpoint.dir", too_long) == line


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


def test_the_write_probe_writes_in_the_folder_itself_not_in_the_temp_dir(tmp_path, monkeypatch):
    """A machine whose temp dir is gone still passes a checkpoint folder that takes files: the probe is made there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-temp-dir"))
    pf.check_folder_writable("checkpoint.dir", tmp_path / "models")
    pf.check_writable(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_key_only_a_framework_with_its_capability_reads_is_refused_with_the_frameworks_own_why():
    """The schema's `needs` (a capability of train/frameworks/base.py): a framework that provides one of them reads
    the key; one that does not refuses it with its contract's line (`lacks`), no framework named in the schema."""
    def resume_of(framework, **dotted):
        return with_(composed(), workload="resume", framework__name=framework, **dotted)

    pf.check_used(resume_of("torch_loop", checkpoint__pointer=True), ["checkpoint.pointer=true"])
    pf.check_used(resume_of("lightning", checkpoint__async_save=True), ["checkpoint.async_save=true"])
    pf.check_used(resume_of("deepspeed", fault__older_run=True), ["fault.older_run=true"])
    assert refused(pf.check_used, resume_of("deepspeed", checkpoint__async_save=True),
                   ["checkpoint.async_save=true"]) == (
        "checkpoint.async_save=True: read only by a framework with dcp_async_save or async_top_k; this run has "
        "framework=deepspeed, which ignores it: save_checkpoint saves synchronously here; it has no async save to run")
    assert refused(pf.check_used, resume_of("fastai", checkpoint__async_save=True), ["checkpoint.async_save=true"]) \
        .endswith("which ignores it: fastai provides no dcp_async_save, an async save through "
                  "torch.distributed.checkpoint.async_save (checkpoint.async_save)")  # the first it needs
    assert refused(pf.check_used, resume_of("torch_loop", fault__older_run=True), ["fault.older_run=true"]) == (
        "fault.older_run=True: read only by a framework with older_run; this run has framework=torch_loop, which "
        "ignores it: the loop's own `latest` pointer (checkpoint.pointer) has no older run planted for it "
        "(fault.older_run is DeepSpeed's)")


def test_a_key_the_run_ignores_is_refused_in_the_words_the_user_types():
    """framework.name is typed framework, every value the key is read with is listed, booleans read as typed (true)."""
    resume = with_(composed(), workload="resume")
    assert refused(pf.check_used, resume, ["checkpoint.pointer=true"]) == (
        "checkpoint.pointer=False: read only by a framework with pointer; this run has framework=fastai, which "
        "ignores it: fastai provides no pointer, a `latest` pointer or link that the save writes and the resume "
        "follows")
    assert refused(pf.check_used, composed(), ["fault.async_fault=overlap"]) == (
        "fault.async_fault=None: read only with checkpoint.async_save=true; this run has checkpoint.async_save=false, "
        "which ignores it")
    assert refused(pf.check_used, composed(), ["fault.slow_write_s=1"]) == (
        "fault.slow_write_s=4.0: read only with fault.async_fault=slow_write; this run has fault.async_fault=None, "
        "which ignores it")


def test_a_given_key_is_what_comes_before_the_first_equals_sign_less_only_the_plus_and_tilde():
    assert pf.given_keys(["+fix.kwargs.note=a=b", "XLA_FLAGS=1"]) == ["fix.kwargs.note", "XLA_FLAGS"]


def test_the_first_line_of_an_error_is_cut_at_300_characters():
    assert pf.first_line(ValueError("x" * 400 + "\nsecond")) == "x" * 300


def test_discarding_a_run_dir_hydra_never_made_or_already_gone_removes_what_is_empty_and_raises_nothing(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "day").mkdir(parents=True)
    pf.discard_run_dir(tmp_path / "runs" / "day" / "gone")  # nothing there: nothing to remove, its parents stay
    assert (tmp_path / "runs" / "day").is_dir()
    pf.discard_run_dir(tmp_path / "runs" / "day")  # no .hydra in it
    assert list(tmp_path.iterdir()) == []


def test_preflight_refuses_in_its_checks_lines_naming_checkpoint_dir_and_the_key_given(tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    kept = with_(composed(), checkpoint__dir=str(a_file), checkpoint__keep_existing=True)
    assert refused(pf.preflight, kept, this_machine(), False) == f"checkpoint.dir={str(a_file)!r}: a file, not a folder"
    under = with_(composed(), checkpoint__dir=str(a_file / "m"))
    assert refused(pf.preflight, under, this_machine(), False) == (
        f"checkpoint.dir={str(a_file / 'm')!r}: {a_file} is a file, not a folder")
    assert refused(pf.preflight, with_(composed(), checkpoint__dir=str(tmp_path / "m")), this_machine(), False,
                   ["fault.async_fault=overlap"]) == (
        "fault.async_fault=None: read only with checkpoint.async_save=true; this run has checkpoint.async_save=false, "
        "which ignores it")


def test_preflight_checks_the_data_unless_told_not_to(tmp_path):
    data = {"name": "mnist_sample", "url": "nowhere", "cache": str(tmp_path / "none"), "batch_size": 64}
    cfg = with_(composed(), checkpoint__dir=str(tmp_path / "m"), data=data)
    pf.preflight(cfg, this_machine(), reach_data=False)
    assert refused(pf.preflight, cfg, this_machine()) == (
        "data.url='nowhere': cannot download mnist_sample (unknown url type: 'nowhere'); data=digits works offline")


class _HeadOnly(http.server.BaseHTTPRequestHandler):
    """A data server that answers HEAD only: 200 for /there, 404 for anything else (other methods: 501)."""

    def do_HEAD(self):
        self.send_response(200 if self.path == "/there" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def data_server(monkeypatch):
    """The URL of a local _HeadOnly server, reached without any proxy of the environment."""
    monkeypatch.setenv("no_proxy", "*")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HeadOnly)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_data_is_probed_with_a_head_of_its_url_and_a_refusal_says_the_servers_reason(tmp_path, data_server):
    missing = str(tmp_path / "none")
    pf.check_data_reachable({"name": "mnist", "url": f"{data_server}/there", "cache": missing})
    assert refused(pf.check_data_reachable, {"name": "mnist", "url": f"{data_server}/gone", "cache": missing}) == (
        f"data.url='{data_server}/gone': cannot download mnist (Not Found); data=digits works offline")
    assert refused(pf.check_data_reachable, {"name": "mnist", "url": "nowhere", "cache": missing}) == (
        "data.url='nowhere': cannot download mnist (unknown url type: 'nowhere'); data=digits works offline")


def test_the_data_probe_gives_a_server_that_never_answers_10_seconds(tmp_path):
    """What urllib hands the connection (a real wait of 10 s is too long for a unit test): HEAD, the url, 10 s."""
    asked = []

    class Probe(urllib.request.BaseHandler):
        def probe_open(self, req):
            asked.append((req.get_method(), req.full_url, req.timeout))
            return urllib.response.addinfourl(open(os.devnull, "rb"), {}, req.full_url, 200)

    urllib.request.install_opener(urllib.request.build_opener(Probe))  # urllib's public seam for its opener
    try:
        pf.check_data_reachable({"name": "mnist", "url": "probe://data/x.tgz", "cache": str(tmp_path / "none")})
    finally:
        urllib.request.install_opener(None)  # urlopen builds its default opener again
    assert asked == [("HEAD", "probe://data/x.tgz", 10)]
