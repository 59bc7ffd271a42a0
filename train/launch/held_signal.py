"""Signals held for later: a Ctrl-C or SIGTERM that comes where raising it would break something is kept, and the run
raises it once its handlers are in place (train/launch/elastic.py raise_held, train/launch/nodes.py).

- A sweep's job worker outside its run (train/launch/sweep.py enter_worker): raised there (loky's default:
  KeyboardInterrupt), it broke the sweep's pool, and the sweep's end killed its other running jobs before they wrote
  their summaries.
- A run starting its threads (holding_signals): raised inside Thread.start(), threading's own `except Exception`
  unregisters a thread that already runs, and the thread dies printing a KeyError traceback."""
import signal
from contextlib import contextmanager

held = []  # the signals taken and not yet raised, in the order they came


def hold_signal(signum, frame):
    held.append(signum)


@contextmanager
def holding_signals():
    """Within: SIGINT and SIGTERM are held, not raised; after, the handlers before are back."""
    before = {s: signal.signal(s, hold_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
