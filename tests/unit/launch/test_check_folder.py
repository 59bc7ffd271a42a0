"""Where a check writes (train/launch/check.py fresh_folder): a folder of its own, even when checks start in the
same second from one folder, as parallel CI jobs in one workspace do (before, both wrote into
runs/check/<second>-<framework>-<fix>/, and one check.json was left for two checks)."""
from concurrent.futures import ThreadPoolExecutor

from train.launch.folders import fresh_folder


def test_checks_started_together_each_get_a_new_folder_of_their_own(tmp_path):
    base = tmp_path / "runs" / "check" / "2026-12-03_20-00-00-lightning-own"
    with ThreadPoolExecutor(8) as pool:
        folders = list(pool.map(lambda _: fresh_folder(base), range(8)))
    assert len(set(folders)) == 8 and all(f.is_dir() and not any(f.iterdir()) for f in folders)
    assert sorted(f.name for f in folders) == sorted([base.name] + [f"{base.name}-{n}" for n in range(2, 9)])
