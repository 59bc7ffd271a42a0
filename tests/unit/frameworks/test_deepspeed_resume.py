"""DeepSpeed's resume loop (train/frameworks/deepspeed/resume.py) on one real gloo rank in this process, around a
stand-in for DeepSpeed's engine that reads and writes tag folders as 0.19.8's does (load_checkpoint(dir, tag=None)
reads `latest`, and finds nothing without it; save_checkpoint writes global_step<N>/ and, unless save_latest=False,
`latest`): which tag each fix resumes from, and what each writes after a save (issue 43). The real engine on two
ranks is the slow tier's (tests/e2e/frameworks/test_deepspeed.py)."""
import json
from pathlib import Path

import pytest
import torch

from helpers.gloo import on_two_ranks, one_rank
from train.frameworks.deepspeed import resume as ds_resume
from train.frameworks.deepspeed.resume import DeepSpeedResume
from helpers.recorded import Events

RUN = "this-run"
MODEL, SHARD = "mp_rank_00_model_states.pt", "zero_pp_rank_{}_mp_rank_00_optim_states.pt"


class Faults:
    def __init__(self):
        self.points = []

    def kill_point(self, at, epoch, path):
        self.points.append((at, epoch, Path(path).name))


class Engine:
    """DeepSpeed 0.19.8's engine as far as the loop uses it: the tag it reads, the files it writes."""

    def __init__(self, global_steps=0, fails=None):
        self.module = torch.nn.Linear(2, 2)
        self.global_steps, self.loads, self.latest_asked, self.fails = global_steps, [], [], fails

    def load_checkpoint(self, load_dir, tag=None):
        self.loads.append(tag)
        if self.fails:
            raise self.fails
        if tag is None:
            latest = Path(load_dir) / "latest"
            if not latest.is_file():
                return None, None  # "Unable to find latest file": a fresh start
            tag = latest.read_text().strip()
        model = Path(load_dir) / tag / MODEL
        client = json.loads(model.read_text())
        self.global_steps = client["step"]
        return str(model), {"epoch": client["epoch"]}

    def save_checkpoint(self, save_dir, client_state, save_latest=True):
        self.latest_asked.append(save_latest)
        tag = f"global_step{self.global_steps}"
        write_tag(Path(save_dir), tag, client_state["epoch"], self.global_steps)
        if save_latest:
            (Path(save_dir) / "latest").write_text(tag)


def write_tag(folder: Path, tag: str, epoch: int, step: int, shards=(0,), model=True):
    (folder / tag).mkdir(parents=True, exist_ok=True)
    if model:
        (folder / tag / MODEL).write_text(json.dumps({"epoch": epoch, "step": step}))
    for s in shards:
        (folder / tag / SHARD.format(s)).write_text("shard")


class Rank:
    def __init__(self, folder: Path, fix: str):
        self.cfg = {"fix": {"name": fix}, "checkpoint": {"dir": str(folder), "node_local": False},
                    "rdzv": {"id": RUN}, "timeout": {"collective_s": 20}, "framework": {"zero_stage": 2}}
        self.events, self.faults = Events(), Faults()


@pytest.fixture
def loop(tmp_path, monkeypatch):
    """loop(fix): the resume loop of one rank over tmp_path/m, with the stand-in engine."""
    with one_rank(tmp_path):
        def make(fix):
            made = DeepSpeedResume(Rank(tmp_path / "m", fix))
            made.engine, made.said = Engine(), []
            monkeypatch.setattr(ds_resume, "say", made.said.append)  # what the rank prints, this loop's
            return made
        yield make


def older_run_left(folder: Path, manifest_run="older-7"):
    """What an older run left: its global_step10 (whole) and `latest` naming it, and a manifest naming that run."""
    write_tag(folder, "global_step10", 0, 10)
    (folder / "latest").write_text("global_step10")
    (folder / "manifest.json").write_text(json.dumps({"run": manifest_run, "tag": "global_step10", "step": 10}))


def resumed(made):
    """(the tag folder, epoch, step) of the one resume it recorded, after checking the rest of that record: the
    weights it resumed with and the tags it listed."""
    (e,) = made.events.of("resume")
    assert e["digest"] == made.digest() and e["listing"] == made.tags()
    return e["path"] and Path(e["path"]).name, e["epoch"], e["step"]


def test_the_manifest_fix_never_falls_back_to_latest_when_the_manifest_names_another_run(loop, tmp_path):
    """fix=manifest beside a foreign manifest and a `latest` naming that run's whole tag: a fresh start (DeepSpeed's
    load_checkpoint is not asked to read `latest`); as shipped the same folder is resumed from silently."""
    older_run_left(tmp_path / "m")
    fixed = loop("manifest")
    assert fixed.resume() == 0
    assert resumed(fixed) == (None, -1, 0) and fixed.engine.loads == []
    assert fixed.events.of("load_attempt") == []
    assert fixed.said == ["manifest.json names no checkpoint of this run (this-run): not resumed from"]
    shipped = loop("as_shipped")
    assert shipped.resume() == 1 and resumed(shipped) == ("global_step10", 0, 10) and shipped.engine.loads == [None]
    assert shipped.said == ["Resumed from global_step10 (epoch 0, step 10)."]


def test_the_manifest_fix_resumes_from_the_tag_its_own_runs_manifest_names(loop, tmp_path):
    older_run_left(tmp_path / "m", manifest_run=RUN)
    write_tag(tmp_path / "m", "global_step20", 1, 20)  # newer, but no manifest names it
    fixed = loop("manifest")
    assert fixed.resume() == 1 and resumed(fixed) == ("global_step10", 0, 10)
    assert fixed.engine.loads == ["global_step10"] and fixed.said == ["Resumed from global_step10 (epoch 0, step 10)."]
    model = tmp_path / "m" / "global_step10" / MODEL
    assert [(e["path"], e["bytes"]) for e in fixed.events.of("load_attempt")] == [(str(model.parent),
                                                                                   model.stat().st_size)]


def test_the_manifest_fix_with_no_manifest_or_one_that_names_a_tag_not_whole_starts_fresh(loop, tmp_path):
    write_tag(tmp_path / "m", "global_step10", 0, 10)
    (tmp_path / "m" / "latest").write_text("global_step10")
    none = loop("manifest")
    assert none.resume() == 0 and resumed(none) == (None, -1, 0) and none.engine.loads == []
    assert none.said == []  # no manifest at all: nothing to say of one
    (tmp_path / "m" / "manifest.json").write_text(json.dumps({"run": RUN, "tag": "global_step30"}))
    missing = loop("manifest")
    assert missing.resume() == 0 and resumed(missing) == (None, -1, 0) and missing.engine.loads == []
    assert missing.said == ["manifest.json names no checkpoint of this run (this-run): not resumed from"]


def test_agreed_resumes_from_the_newest_tag_it_holds_whole_latest_first(loop, tmp_path):
    folder = tmp_path / "m"
    write_tag(folder, "global_step10", 0, 10)
    write_tag(folder, "global_step20", 1, 20, shards=())  # its shard never landed
    write_tag(folder, "global_step30", 2, 30, model=False)  # its model file never landed
    (folder / "latest").write_text("global_step30")
    agreed = loop("agreed")
    assert agreed.resume() == 1 and resumed(agreed) == ("global_step10", 0, 10)
    assert agreed.engine.loads == ["global_step10"]
    assert [e["path"] for e in agreed.events.of("resume")] == [str(folder / "global_step10")]
    write_tag(folder, "global_step100", 3, 100)  # newer by its step, though `latest` names 30
    assert loop("agreed").tags() == ["global_step100", "global_step30", "global_step20", "global_step10"]
    newest = loop("agreed")
    assert newest.resume() == 4 and resumed(newest) == ("global_step100", 3, 100)
    (folder / "latest").write_text("global_step10")  # `latest` first among the candidates
    named = loop("agreed")
    assert named.resume() == 1 and named.engine.loads == ["global_step10"]


def test_agreed_with_no_whole_tag_starts_fresh_and_as_shipped_without_latest_too(loop, tmp_path):
    write_tag(tmp_path / "m", "global_step10", 0, 10, shards=())
    agreed = loop("agreed")
    assert agreed.resume() == 0 and resumed(agreed) == (None, -1, 0) and agreed.engine.loads == []
    shipped = loop("as_shipped")
    assert shipped.resume() == 0 and resumed(shipped) == (None, -1, 0) and shipped.engine.loads == [None]
    assert loop("as_shipped").tags() == ["global_step10"]
    assert DeepSpeedResume(Rank(tmp_path / "none", "agreed")).tags() == []


def test_a_failed_read_is_recorded_with_the_tag_and_raised(loop, tmp_path):
    (tmp_path / "m" / "global_step10").mkdir(parents=True)
    (tmp_path / "m" / "latest").write_text("global_step10")  # names a folder with no model file
    shipped = loop("as_shipped")
    with pytest.raises(FileNotFoundError):
        shipped.resume()
    assert [(Path(e["path"]).name, e["bytes"]) for e in shipped.events.of("load_attempt")] == [("global_step10", None)]
    (error,) = shipped.events.of("load_error")
    assert (Path(error["path"]).name, error["error_type"]) == ("global_step10", "FileNotFoundError")
    assert MODEL in error["message"] and len(shipped.said) == 1
    assert shipped.said[0] == f"Resume from global_step10 failed: FileNotFoundError: {error['message']}"


def test_a_read_that_fails_with_no_tag_named_is_recorded_against_the_folder_and_raised(loop, tmp_path):
    shipped = loop("as_shipped")
    shipped.engine.fails = OSError("disk gone")  # no `latest`: DeepSpeed is asked for tag=None
    with pytest.raises(OSError):
        shipped.resume()
    assert shipped.events.of("load_attempt") == []
    assert [(e["path"], e["error_type"], e["message"]) for e in shipped.events.of("load_error")] == [
        (str(tmp_path / "m" / "?"), "OSError", "disk gone")]


@pytest.mark.parametrize("fix, latest, manifest", [("as_shipped", True, False), ("atomic", True, False),
                                                   ("agreed", True, False), ("manifest", True, True),
                                                   ("node_local_storage", True, True)])
def test_each_fix_writes_the_tag_and_the_manifest_as_it_says_after_every_save(loop, tmp_path, fix, latest, manifest):
    made = loop(fix)
    made.engine.global_steps = 20
    made.save(1)
    folder = tmp_path / "m"
    assert (folder / "latest").read_text() == "global_step20"
    assert (folder / "manifest.json").exists() == manifest
    if manifest:
        assert json.loads((folder / "manifest.json").read_text()) == {"run": RUN, "tag": "global_step20", "step": 20}
    assert made.engine.latest_asked == [fix in ("as_shipped", "agreed")]  # the others write `latest` after every rank
    start, end = made.events.of("save_start"), made.events.of("save_end")
    assert [(e["epoch"], e["step"], e["path"]) for e in start] == [(1, 20, str(folder / "global_step20"))]
    assert [(e["epoch"], e["step"], e["path"], e["bytes"]) for e in end] == [
        (1, 20, str(folder / "global_step20"), (folder / "global_step20" / MODEL).stat().st_size + len("shard"))]
    assert end[0]["digest"] == made.digest()
    assert made.faults.points == [("after_save", 1, "global_step20")]


def test_on_two_ranks_each_starts_at_the_epoch_after_the_newest_any_resumed_and_whole_counts_each_node_s_ranks(
        tmp_path, monkeypatch):
    """Two real gloo ranks resuming the same epoch-0 tag both start at epoch 1 (an all-reduce MAX, not a sum); a tag
    holding the model file and rank 1's shard alone is whole for rank 1 under node_local_storage (its node's disk
    holds its own shard) and for no rank otherwise, since every rank's shard is needed."""
    monkeypatch.setattr(ds_resume, "say", lambda *a: None)
    folder = tmp_path / "m"
    write_tag(folder, "global_step10", 0, 10, shards=(0, 1))
    write_tag(folder, "global_step20", 1, 20, shards=(1,))
    (folder / "latest").write_text("global_step10")

    def body(rank):
        shipped = DeepSpeedResume(Rank(folder, "as_shipped"))
        shipped.engine = Engine()
        return (shipped.resume(), DeepSpeedResume(Rank(folder, "node_local_storage")).whole("global_step20"),
                DeepSpeedResume(Rank(folder, "agreed")).whole("global_step20"))

    assert on_two_ranks(tmp_path / "group", body) == [(1, False, False), (1, True, False)]
