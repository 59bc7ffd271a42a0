"""A signal that comes while the run's threads start is held, then raised once they run (train/launch/held_signal.py)."""
import os
import signal
import threading

import pytest
from torch.distributed.elastic.multiprocessing.api import SignalException

from train.launch.elastic import raise_held, raise_signal_exception
from train.launch.held_signal import held, holding_signals


def test_a_sigint_while_a_thread_starts_is_held_and_raised_after_with_the_thread_running():
    ran = threading.Event()
    before = signal.signal(signal.SIGINT, raise_signal_exception)  # the run's handler (train/launch/experiment.py)
    try:
        with holding_signals():
            os.kill(os.getpid(), signal.SIGINT)  # Python runs the handler in this thread at the next instruction
            thread = threading.Thread(target=ran.set, daemon=True)
            thread.start()
        assert held == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is raise_signal_exception  # the handler before is back
        thread.join(5)
        assert ran.is_set()  # it ran: not unregistered by a raise inside start() (it died of a KeyError then)
        with pytest.raises(SignalException) as raised:
            raise_held()
        assert raised.value.sigval == signal.SIGINT and held == []
    finally:
        held.clear()
        signal.signal(signal.SIGINT, before)
