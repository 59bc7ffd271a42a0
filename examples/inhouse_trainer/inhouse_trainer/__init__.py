"""A team's own trainer (trainer.py) and what race-lab needs to check it (race_lab.py: the contract, adapter.py)."""
