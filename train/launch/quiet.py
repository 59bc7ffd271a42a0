"""A quiet console while the ranks run: what torch writes for itself goes to the run's logs, not the console.

torch's C++ side writes straight to the process's stderr (file descriptor 2): a TCPStore client whose server
has gone (a node agent at its exit barrier after the other node's agent ended, the rendezvous closing) logs
`[W... TCPStore.cpp:115] [c10d] recvVector failed ...` with a 30-frame C++ stack trace, and nothing the run
judges depends on it. So while the ranks run, the launcher's descriptor 2 points at logs/launcher.log in the
run dir, and Python's sys.stderr (the launcher's own lines, and each rank's stderr that torch elastic echoes
with launch.echo_ranks or in a single run) passes through a filter to the console: a C++ source location and
its frames, a Python traceback but its last line (the error, kept as one line), a Python or torch warning
and its source line go to that log only. Every line also lands in the log; each rank's own output stays
whole in its logs/<run id>/attempt_<k>/<rank>/. On sys.stdout (the ranks' own lines, echoed) every line is shown,
a C++ place it quotes taken out: `rank 2: barrier failed: RuntimeError: Connection closed by peer ...`.
"""
import os
import re
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

LAUNCHER_LOG = "launcher.log"  # in the run dir's logs/
CPP_LOCATION = re.compile(r"\w+\.(?:cpp|cc|cxx|cu|h|hpp):\d+")  # TCPStore.cpp:115, Utils.hpp:787
CPP_PLACE = re.compile(r"\[?[^\s\[\]]*\w+\.(?:cpp|cc|cxx|cu|h|hpp):\d+\]? ?")  # [../gloo/pair.cc:534]
CPP_TRACE = re.compile(r"^(?:frame #\d+: |<omitting python frames>$|Exception raised from )")
PYTHON_WARNING = re.compile(r"\.py:\d+: \w*Warning: ")  # warnings.showwarning: path.py:12: UserWarning: text
LOGGED_WARNING = re.compile(r"^\[?[WI]\d{4} \d\d:\d\d:\d\d\.\d+ ")  # torch's own log lines: W1201 21:34:48.25 ...
TRACEBACK = "Traceback (most recent call last):"
CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
SOURCE = re.compile(r"^(?:\[rank (\d+)\] ?)?(.*)$", re.DOTALL)  # the prefix torch elastic puts on each echoed rank line


class ConsoleFilter:
    """A text stream for sys.stderr: every line to `log`, and to `console` only the lines a person reads.
    Lines are judged whole, per writing thread (print writes its text and its newline apart), and per
    source (each echoed rank's prefix, or none), as a traceback goes on over several lines."""

    def __init__(self, console, log=None):
        """Without a log (sys.stdout: the ranks' own lines, echoed) every line is shown, its C++ places taken out."""
        self.console, self.log = console, log
        self._lock = threading.RLock()  # a signal handler in the main thread may write while it holds it
        self._partial = {}  # writing thread -> its text so far without a newline
        self._inside = {}  # source -> "traceback" | "cpp" | "warning" while a block of lines is dropped

    def write(self, text: str) -> int:
        with self._lock:
            thread = threading.get_ident()
            *lines, rest = (self._partial.pop(thread, "") + text).split("\n")
            if rest:
                self._partial[thread] = rest
            for line in lines:
                self._line(line)
        return len(text)

    def _line(self, line: str):
        if self.log is None:  # a rank's message may quote a C++ error: 'barrier failed: RuntimeError: [pair.cc:534] ..'
            self.console.write(CPP_PLACE.sub("", line) + "\n")
            return
        self.log.write(line + "\n")
        shown = self.shown(line)
        if shown is not None:
            self.console.write(shown + "\n")

    def shown(self, line: str):
        """What the console shows of this line, or None (it depends on the lines before it from its source)."""
        source, text = SOURCE.match(line).groups()
        inside = self._inside.pop(source, None)
        if inside == "traceback":
            if not text.strip() or text.startswith((" ", "\t", TRACEBACK, *CHAINED)):
                self._inside[source] = inside
                return None
            return CPP_PLACE.sub("", line)  # the error itself, as one line (gloo's puts its C++ place in it)
        if inside == "cpp" and (CPP_TRACE.match(text) or not text.strip()):
            self._inside[source] = inside
            return None
        if inside == "warning" and text.startswith((" ", "\t")):
            return None  # the warning's source line
        if text.startswith(TRACEBACK):
            self._inside[source] = "traceback"
            return None
        if CPP_LOCATION.search(text) or CPP_TRACE.match(text):
            self._inside[source] = "cpp"
            return None
        if PYTHON_WARNING.search(text) or LOGGED_WARNING.match(text):
            self._inside[source] = "warning"
            return None
        return line

    def flush(self):
        with self._lock:
            for line in self._partial.values():  # a line that never got its newline
                self._line(line)
            self._partial.clear()
            if self.log is not None:
                self.log.flush()
            self.console.flush()

    def fileno(self) -> int:
        return self.console.fileno()

    def isatty(self) -> bool:
        return self.console.isatty()

    @property
    def encoding(self):
        return self.console.encoding

    @property
    def errors(self):
        return self.console.errors


@contextmanager
def quiet_console(run_dir: Path):
    """While inside: file descriptor 2 writes to <run_dir>/logs/launcher.log, and sys.stderr reaches the console
    through ConsoleFilter. Restored on the way out, also on an exception or a signal."""
    log_path = Path(run_dir) / "logs" / LAUNCHER_LOG
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    before = sys.stderr
    with signals_held():  # a stop signal waits until the descriptors are set, not left half done
        console_fd = os.dup(2)
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        # both stay open until the block ends, past the yield: closed in the finally below
        console = open(console_fd, "w", buffering=1,  # noqa: SIM115
                       encoding=getattr(before, "encoding", None) or "utf-8", errors="backslashreplace")
        log = open(log_path, "a", buffering=1, encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
        quiet = ConsoleFilter(console, log)
        sys.stderr = quiet
        before_out = sys.stdout
        sys.stdout = out = ConsoleFilter(before_out)
    try:
        yield quiet
    finally:
        with signals_held():
            quiet.flush()
            out.flush()
            if sys.stderr is quiet:
                sys.stderr = before
            if sys.stdout is out:
                sys.stdout = before_out
            os.dup2(console_fd, 2)
            console.close()  # and console_fd with it
            log.close()


@contextmanager
def signals_held():
    """SIGINT and SIGTERM wait (in the main thread, where Python runs their handlers) until the block ends."""
    held = {signal.SIGINT, signal.SIGTERM}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
