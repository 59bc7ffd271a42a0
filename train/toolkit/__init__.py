"""The rank's toolkit, handed to every adapter and fix: the rank's context (rank.py), errors as event fields
(errors.py), the small model (model.py) and its data (data.py), and the hang detector (hang.py)."""
