"""The file watch (train/rank/observe.py) in a process of its own, as in a rank: an audit hook stays for the life of
its process."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from train.events import read_events
from train.rank.observe import SWITCH

A_RANK = textwrap.dedent("""
    import os, shutil, sys
    from train.events import EventLog
    from train.rank.observe import FileWatch
    run_dir, folder = sys.argv[1], sys.argv[2]
    events = EventLog(run_dir, 0)
    watch = FileWatch(events, [folder])
    watch.install()
    with open(os.path.join(folder, "best.pth"), "wb") as f:
        f.write(b"weights")
    open(os.path.join(folder, "best.pth"), "rb").close()
    os.replace(os.path.join(folder, "best.pth"), os.path.join(folder, "final.pth"))
    os.listdir(folder)
    os.remove(os.path.join(folder, "final.pth"))
    open(os.path.join(run_dir, "elsewhere.txt"), "w").close()  # not under the folder: not recorded
    watch.record_end()
""")


@pytest.mark.parametrize("switch", [None, "off"])
def test_the_watch_records_what_the_rank_did_to_the_folder_and_nothing_when_switched_off(tmp_path, switch):
    folder = tmp_path / "models"
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k != SWITCH} | ({SWITCH: switch} if switch else {})
    subprocess.run([sys.executable, "-c", A_RANK, str(tmp_path), str(folder)], env=env, check=True, timeout=60,
                   cwd=Path(__file__).resolve().parents[3])
    events = read_events(tmp_path)
    ops = [(e["op"], os.path.basename(e["path"]), e.get("mode")) for e in events if e["event"] == "file_op"]
    watched = [e for e in events if e["event"] == "file_watch"]
    if switch == "off":  # make bench's unwatched half of a pair
        assert ops == [] and watched[0]["calls"] == 0
        return
    assert ops == [("open", "best.pth", "w"), ("open", "best.pth", "r"), ("rename", "best.pth", None),
                   ("list", "models", None), ("remove", "final.pth", None)]
    read = next(e for e in events if e["event"] == "file_op" and e.get("mode") == "r")
    assert (read["exists"], read["bytes"]) == (True, len(b"weights"))
    assert watched[0]["calls"] > 0
