"""What the Ray launcher does without a cluster: what a job reserves, its records packed and unpacked, the sweep's
callback pointed at the task's own folder. The cluster itself: tests/e2e/test_ray_cluster.py."""
import io
import tarfile

import pytest
from omegaconf import OmegaConf

from train.launch.ray_jobs import pack, reserves, unpack
from train.launch.sweep import SweepProgress, lines_into


@pytest.mark.parametrize("world_size, nnodes, device, expected", [
    (2, 1, "cpu", {"num_cpus": 2, "num_gpus": 0}),
    (3, 1, "auto", {"num_cpus": 3, "num_gpus": 0}),
    (4, 2, "cpu", {"num_cpus": 2, "num_gpus": 0}),  # one node's share
    (2, 1, "cuda", {"num_cpus": 2, "num_gpus": 2}),
])
def test_a_job_reserves_a_cpu_per_rank_on_its_node_and_a_gpu_per_rank_on_cuda(world_size, nnodes, device, expected):
    cfg = OmegaConf.create({"world_size": world_size, "nnodes": nnodes, "device": device})
    assert reserves(cfg) == expected


def test_a_run_dir_packed_comes_back_whole_where_the_driver_puts_it(tmp_path):
    run = tmp_path / "node" / "0-job"
    (run / "events").mkdir(parents=True)
    (run / "events" / "rank0.jsonl").write_text('{"event": "final"}\n')
    (run / "summary.json").write_text("{}\n")
    unpack(pack(run), tmp_path / "driver" / "0-job")
    got = sorted(str(p.relative_to(tmp_path / "driver" / "0-job")) for p in (tmp_path / "driver" / "0-job").rglob("*"))
    assert got == ["events", "events/rank0.jsonl", "summary.json"]
    assert (tmp_path / "driver" / "0-job" / "events" / "rank0.jsonl").read_text() == '{"event": "final"}\n'


def test_records_that_would_land_outside_the_run_dir_are_refused(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = b"x"
        member = tarfile.TarInfo("../outside.txt")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    with pytest.raises(tarfile.OutsideDestinationError):
        unpack(buffer.getvalue(), tmp_path / "run")
    assert not (tmp_path / "outside.txt").exists()


def test_in_a_ray_worker_the_sweeps_lines_go_to_the_tasks_folder_and_the_worker_keeps_rays_session(tmp_path):
    class Callbacks:
        callbacks = [SweepProgress(), object()]

    lines_into(Callbacks, tmp_path)
    progress = Callbacks.callbacks[0]
    assert (progress.sweep_dir, progress.leads_session) == (tmp_path, False)
    assert SweepProgress().leads_session  # a joblib worker still takes a session of its own
