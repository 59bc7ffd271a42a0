"""A quiet console (train/launch/quiet.py): while the ranks run, torch's C++ warnings with their stack traces,
Python tracebacks and warnings go to the run's logs/launcher.log; the console keeps each error as one line.
(Real runs and a sweep are checked on the console in test_race.py and test_sweep.py, from their fixtures.)"""
import io
import sys
from datetime import timedelta

import torch.distributed as dist

from conftest import console_noise
from train.launch.quiet import ConsoleFilter, quiet_console

ECHOED = """\
[rank 0] 21:34:48.258 rank 0: Model saved.
[rank 1] Traceback (most recent call last):
[rank 0] /x/lightning/trainer.py:12: UserWarning: The dataloader does not have many workers
[rank 1]   File "/work/main/train/rank/worker.py", line 41, in run_rank
[rank 0]   rank_zero_warn(
[rank 1]     entry(cfg)(Rank(cfg, plan, run_dir, events, Faults(cfg, events, say), device))
[rank 1]     ^^^^^^^^^^
[rank 1] RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:5
[rank 1] Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:790 (most recent call first):
[rank 1] frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f in libc10.so)
[rank 1] <omitting python frames>
[rank 1]
[rank 0] 21:34:52.342 rank 0: Loaded model.
[W1201 21:45:40.724504023 TCPStore.cpp:115] [c10d] recvVector failed on SocketImpl(fd=7): Connection reset by peer
Exception raised from recvBytes at /__w/pytorch/pytorch/torch/csrc/distributed/c10d/Utils.hpp:787 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f91cf95e60d in libc10.so)
frame #31: _start + 0x21 (0x562e4b206081 in /work/main/.venv/bin/python)

[W1201 21:34:48.258000 4242 torch/distributed/elastic/agent/server/api.py:720] Received Signals.SIGTERM
error: rank 1 failed
"""


def test_the_console_shows_each_line_a_person_reads_and_each_error_as_one_line():
    console, log = io.StringIO(), io.StringIO()
    quiet = ConsoleFilter(console, log)
    for line in ECHOED.splitlines(keepends=True):  # a line at a time, as torch elastic's echo writes them
        quiet.write(line)
    print("a line", "in two writes", file=quiet)
    quiet.write("no newline")
    quiet.flush()
    assert console.getvalue().splitlines() == [
        "[rank 0] 21:34:48.258 rank 0: Model saved.",
        "[rank 1] RuntimeError: Connection closed by peer [127.0.0.1]:5",  # the traceback's error, without its place
        "[rank 0] 21:34:52.342 rank 0: Loaded model.",
        "error: rank 1 failed", "a line in two writes", "no newline"]
    assert log.getvalue() == ECHOED + "a line in two writes\nno newline\n"  # every line, whole
    assert len(console_noise(ECHOED)) == 6 and not console_noise(console.getvalue())
    out = io.StringIO()  # stdout: a rank's own line that quotes gloo's error keeps all but the C++ place
    ConsoleFilter(out).write("[rank 2] rank 2: barrier failed: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/"
                             "gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:5\n")
    assert out.getvalue() == "[rank 2] rank 2: barrier failed: RuntimeError: Connection closed by peer [127.0.0.1]:5\n"


def test_torch_s_own_cpp_warning_goes_to_the_run_s_log_and_the_console_is_put_back(tmp_path, capfd):
    """A real TCPStore client whose server has gone: torch's C++ logs the warning with its stack trace to file
    descriptor 2, as a node agent's store does at its exit barrier once the other node's agent has ended."""
    before = sys.stderr
    with quiet_console(tmp_path):
        server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5))
        client = dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=timedelta(seconds=5))
        del server
        try:
            client.get("never set")
        except dist.DistError:
            pass
        print("error: the store went away", file=sys.stderr)
    print("after", file=sys.stderr)
    assert sys.stderr is before
    console = capfd.readouterr().err
    assert console == "error: the store went away\nafter\n", console
    log = (tmp_path / "logs" / "launcher.log").read_text()
    assert "TCPStore.cpp:" in log and "frame #0: " in log and "error: the store went away" in log
    assert not console_noise(console)
