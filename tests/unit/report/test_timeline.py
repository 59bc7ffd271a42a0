"""The timeline marks the checkpoint files your code opened: opened_by_you keeps an open the file watch
(train/rank/observe.py) traced to your package, and nothing race-lab or a framework opened."""
from train.report.timeline import opened_by_you


def test_only_the_opens_your_code_made_are_marked():
    yours = {"event": "file_op", "op": "open", "by": "my_ckpt.py:12", "path": "ckpt/best.pth", "mode": "r"}
    events = [
        yours,
        {"event": "file_op", "op": "open", "path": "ckpt/best.pth", "mode": "w"},  # race-lab's or a framework's
        {"event": "file_op", "op": "rename", "by": "my_ckpt.py:14", "path": "ckpt/best.pth"},  # not an open
        {"event": "load_done", "by": "my_ckpt.py:12"},  # not a file operation
    ]
    assert opened_by_you(events) == [yours]
