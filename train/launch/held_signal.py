"""A sweep's job worker outside its run holds a Ctrl-C or SIGTERM for the run instead of dying of it.

The sweep (train/launch/sweep.py enter_worker) installs hold_signal in each worker before and after its run; the
run stops on a held signal as it starts (train/launch/elastic.py raise_held, train/launch/nodes.py). Raised in
the worker instead (loky's default: KeyboardInterrupt), it broke the sweep's pool, and the sweep's end killed its
other running jobs before they wrote their summaries."""

held = []  # the signals taken outside a run, in the order they came


def hold_signal(signum, frame):
    held.append(signum)
