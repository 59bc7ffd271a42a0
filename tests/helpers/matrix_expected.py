"""The matrix's expected cells (make matrix at REPEATS=1, fastai): what tests/e2e/test_matrix.py asserts of every
cell, and what the fast tests pick their defining cells from."""

R, C, SF, NA = "race", "clean", "save_failed", "n/a"
FIXES = ["unsynced", "barrier", "poll", "atomic", "agreed", "broadcast", "dcp", "save_on_each_node", "rank0_leads"]
# make matrix's default is 5 repeats a cell; here 1, so the 72 cells fit the test's time on 2 cores
REPEATS = 1
# scenario -> one (verdict, dominant outcomes) per fix, in FIXES' order
EXPECTED = {
    "seed": [(R, "missing"), (C, ""), (C, ""), (C, ""), (C, ""), (C, ""), (C, ""), (C, ""), (C, "")],
    "stale": [(R, "stale"), (C, ""), (R, "stale"), (R, "stale"), (C, ""), (C, ""), (C, ""), (C, ""), (C, "")],
    "torn": [(R, "corrupt"), (C, ""), (R, "corrupt"), (C, ""), (C, ""), (C, ""), (NA, ""), (C, ""), (C, "")],
    "skip_if_missing": [(R, "skipped"), (R, "hung, skipped"), (C, ""), (C, ""), (C, ""), (R, "hung, skipped"),
                        (C, ""), (R, "hung, skipped"), (C, "")],
    "disagree": [(R, "skipped"), (R, "hung, skipped"), (R, "skipped"), (R, "skipped"), (C, ""),
                 (R, "hung, skipped"), (C, ""), (R, "hung, skipped"), (C, "")],
    "save_fails": [(R, "corrupt, missing"), (R, "corrupt"), (R, "corrupt"), (R, "timeout"), (SF, "skipped"),
                   (R, "corrupt"), (NA, ""), (R, "corrupt"), (SF, "skipped")],
    "many_writers": [(R, "corrupt"), (R, "corrupt"), (R, "corrupt"), (C, ""), (C, ""), (C, ""), (C, ""),
                     (R, "corrupt"), (C, "")],
    "no_shared_fs": [(R, "missing"), (R, "missing"), (R, "timeout"), (R, "timeout"), (R, "missing"), (C, ""), (NA, ""),
                     (C, ""), (C, "")],
}
