"""make bench: time to verdict, each figure beside its goal (cli.py), from the runs that measure.py makes."""
