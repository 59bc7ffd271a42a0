"""Accelerate checkpoint helpers of the tests' own (fix._target_=accelerate_helpers.<Class>, framework=accelerate,
with tests/own_classes on PYTHONPATH) that the check before any rank refuses (tests/e2e/test_own_accelerate.py)."""


class NoResume:
    """Rank0Leads's save and load_best, but no resume."""

    def __init__(self, accelerator, model):
        self.accelerator = accelerator

    def save(self, output_dir=None):
        self.accelerator.save_state(output_dir)

    def load_best(self, input_dir):
        self.accelerator.load_state(input_dir)


class RaisingHelper(NoResume):
    """All three methods; its constructor raises."""

    def __init__(self, accelerator, model):
        raise RuntimeError("no quota for the checkpoints folder")

    def resume(self):
        return None
