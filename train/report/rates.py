"""Rates as counts with a 95% Wilson interval: `race 5/5 (57–100%)`, so one run never reads "100%".

A race rate counts only the runs that gave a verdict on the race. A run that was interrupted, whose
harness failed or that crashed before recording a verdict says nothing about the race: it is
counted apart (NOT_COUNTED), never in a denominator. Pure functions.
"""
from collections import Counter

NOT_COUNTED = ("interrupted", "error", "crashed")


def interval(k: int, n: int) -> tuple:
    """The 95% Wilson score interval of k successes in n > 0 trials, as (low, high) shares."""
    from scipy.stats import (
        binomtest,  # imported here: scipy takes a while and most callers never need it
    )

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def share(k: int, n: int) -> str:
    """'5/5 (57–100%)': the count and its interval, in whole percent."""
    low, high = interval(k, n)
    return f"{k}/{n} ({low * 100:.0f}–{high * 100:.0f}%)"


def label(what: str, k: int, n: int) -> str:
    return f"{what} {share(k, n)}"


def counts(verdicts) -> str:
    """'interrupted 4, error 1': how many of each, the commonest first."""
    return ", ".join(f"{v} {n}" for v, n in Counter(verdicts).most_common())
