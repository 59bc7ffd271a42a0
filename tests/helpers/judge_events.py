"""Hand-made event records for the judge's unit tests (tests/test_judge_*.py): a launch, rank 0's saves, a
reader's load, and a rank's outcome."""
from train.judge.load_best import classify_rank

T0 = 1000.0


def ev(t, rank, event, **fields):
    return {"t": T0 + t, "rank": rank, "event": event, **fields}


def launch(status="ok", *extra):
    return [ev(0, "launcher", "launch_start"), *extra, ev(30, "launcher", "launch_end", status=status)]


def saver(digests=("w-last",), end=12.0):
    """Rank 0 saves once per digest (1800 bytes each); the last save ends at `end`."""
    out = []
    for i, d in enumerate(digests):
        t = end - (len(digests) - 1 - i) * 3
        out += [ev(t - 0.1, 0, "save_start", epoch=i), ev(t, 0, "save_end", epoch=i, digest=d, bytes=1800)]
    return out + [ev(end + 0.1, 0, "load_attempt"), ev(end + 0.2, 0, "load_done", digest=digests[-1]),
                  ev(end + 0.25, 0, "final", digest=digests[-1]), ev(end + 0.3, 0, "rank_end")]


def loader(rank, t, final=None, **result):
    """A rank that loads at t; `final`: the weights it ends with (by default what it loaded, else its own)."""
    name = "load_done" if "digest" in result else "load_error"
    final = final or result.get("digest", "w-trained")
    return [ev(t, rank, "load_attempt"), ev(t + 0.01, rank, name, **result),
            ev(t + 0.015, rank, "final", digest=final), ev(t + 0.02, rank, "rank_end")]


def outcome(rank, events):
    return classify_rank(rank, events).outcome
