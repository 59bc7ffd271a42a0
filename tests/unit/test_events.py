"""The event vocabulary is declared once (train/events.py's EVENTS): a log refuses any other name, so every real-rank
test proves that what adapters, fixes, faults and the launcher record is declared; and every event declared as
judged is one the judge's code reads (its compiled constants, compiled from each module's file)."""
import importlib
import importlib.machinery
import importlib.util
import pkgutil
import threading
import types

import pytest

import train.events
import train.judge
from train.events import EVENTS, JUDGED, SHOWN, EventLog, read_events


def constants(code: types.CodeType) -> set:
    found = {c for c in code.co_consts if isinstance(c, str)}
    for inner in (c for c in code.co_consts if isinstance(c, types.CodeType)):
        found |= constants(inner)
    return found


def judges_strings() -> set:
    found = set()
    for module in pkgutil.iter_modules(train.judge.__path__, "train.judge."):
        origin = importlib.util.find_spec(module.name).origin  # compiled from its file, whoever's loader found it
        found |= constants(importlib.machinery.SourceFileLoader(module.name, origin).get_code(module.name))
    return found


def test_every_event_declared_as_judged_is_read_by_the_judge_and_the_others_are_not():
    read = judges_strings()
    assert JUDGED - read == set()
    assert SHOWN & read == set(), "the judge reads these: declare them JUDGED"
    assert not JUDGED & SHOWN


def test_a_log_refuses_an_event_that_is_not_declared_and_keeps_the_declared_ones(tmp_path):
    log = EventLog(tmp_path, 0)
    log.record("save_start", epoch=0)
    with pytest.raises(ValueError, match="'save_started' is not one of train/events.py's EVENTS"):
        log.record("save_started", epoch=0)
    assert [e["event"] for e in read_events(tmp_path)] == ["save_start"]
    assert "save_start" in EVENTS


def test_after_a_process_records_its_last_event_no_thread_of_it_records_anything(tmp_path):
    """A rank that takes a stop signal records `interrupted` last (train/rank/entry.py): its training thread,
    mid-way to a load as the signal came, waits for the exit instead of recording the load."""
    log = EventLog(tmp_path, 0)
    log.record("load_attempt", path="best.pth")
    log.record_last("interrupted", signal="SIGINT")
    late = threading.Thread(target=log.record, args=("load_done",), daemon=True)
    late.start()
    late.join(0.5)
    try:
        assert late.is_alive()
        assert [e["event"] for e in read_events(tmp_path)] == ["load_attempt", "interrupted"]
    finally:
        train.events._WRITING.release()  # this process goes on to other tests, where a rank would exit
        late.join()
