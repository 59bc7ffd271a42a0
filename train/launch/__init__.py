"""Launching: the Hydra job (job.py), the checks before any rank starts (preflight.py, plan.py, own_class.py),
one run on this host (experiment.py) driving torch elastic (elastic.py), several nodes (nodes.py), a sweep's
progress (sweep.py), the forkserver (forkserver.py) and Hydra's errors as one line (hydra_errors.py).
The launcher never imports a framework."""
