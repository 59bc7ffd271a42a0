"""framework=ray_train's contract (train/frameworks/ray_train/framework.py): what runs, what is n/a and why, all
derived from its declarations; own_workers, the one declaration that changes how race-lab launches it. No Ray."""

import pytest

from helpers.compose import composed
from train.frameworks.base import Framework
from train.frameworks.registry import get
from train.launch.plan import not_applicable

RAY = ["framework=ray_train", "world_size=2"]


def test_ray_train_is_a_sound_framework_that_starts_its_own_workers():
    ray_train = get("ray_train")
    assert ray_train.problems() == []
    assert ray_train.own_workers and not Framework.own_workers
    assert not [name for name in ("fastai", "lightning", "torch_loop", "deepspeed") if get(name).own_workers]


@pytest.mark.parametrize("scenario, fix", [("shard_lost", "as_shipped"), ("shard_lost", "in_place"),
                                           ("shard_lost", "rank0_leads"), ("crash_mid_save", "as_shipped")])
def test_its_scenarios_run_as_shipped_and_with_its_fixes(scenario, fix):
    assert not_applicable(composed(*RAY, f"scenario={scenario}", f"fix={fix}")) is None


@pytest.mark.parametrize("overrides, reason", [
    (["scenario=seed"], "needs load_best; ray_train has none: Ray Train keeps the checkpoints ray.train.report"),
    (["scenario=pointer_first", "fix=as_shipped"], "needs pointer; ray_train has none: Ray Train writes no `latest`"),
    (["scenario=resume_disagree", "fix=as_shipped"], "needs listing; ray_train has none: Ray's resume lists no"),
    (["scenario=stale_tag", "fix=as_shipped"], "needs older_run; ray_train has none"),
    (["scenario=async_in_flight", "fix=as_shipped"], "needs dcp_async_save; ray_train has none"),
    (["scenario=node_local_resume", "fix=as_shipped"], "needs 2 nodes; ray_train starts its own workers from one "
                                                       "driver (its contract's own_workers)"),
    (["scenario=shard_lost", "fix=atomic"], "each worker's part reaches the folder through Ray's upload"),
    (["scenario=shard_lost", "fix=barrier"], "a fix of the load of the best at the end"),
])
def test_what_cannot_happen_in_ray_train_is_n_a_with_the_reason_its_contract_gives(overrides, reason):
    got = not_applicable(composed(*RAY, *overrides))
    assert got is not None and got.startswith(reason), got
