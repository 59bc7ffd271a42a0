"""The console table of a run's verdict: one row per rank."""


def align(rows) -> str:
    """Rows of strings as left-aligned columns."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def format_table(verdict: dict) -> str:
    """Each rank's outcome, when it started loading, how that stood against the save's end, and its wait."""
    rows = [["rank", "outcome", "load at", "vs save end", "sync wait"]]
    for r in verdict["ranks"]:
        t = r["timings"]

        def secs(key, sign="", t=t):
            return f"{t[key]:{sign}.2f} s" if key in t else "-"
        rows.append([str(r["rank"]), r["outcome"], secs("load_attempt"), secs("load_after_save_end", "+"),
                     secs("wait")])
    return align(rows)
