"""The container path run by a real Docker Engine: the image built, the CPU service run end to end, a run
stopped by `docker compose stop`, the GPU request as the engine records it, and a CPU sweep.

Marked `engine`. Where no engine answers (`docker info`) or `docker compose` is missing, every test here skips
with one line saying why, so `make test` passes on a laptop without Docker; with CI=true they fail instead, since
.ci/run starts an engine. The image is built once per module, as race-lab:engine-test, on the stand-in base of
docker/standin-base.sh (no registry is needed), or on RACE_LAB_TEST_BASE_IMAGE when set (e.g. the official one).
The engine's layer cache makes later builds quick. Containers run under their own Compose project, as user
1234:1234, and write under runs/engine-tests/; the tests remove both. Build time and image size are printed.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PROJECT = f"race-lab-engine-test-{os.getpid()}"
TAG = "engine-test"
IMAGE = f"race-lab:{TAG}"
UID = GID = 1234
RUN_ARGS = "world_size=2 epochs=1 skew.seconds=1"


def sh(*args, timeout=120, env=None, **kw):
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else os.environ, **kw)


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no output")


def why_no_engine():
    """None when an engine and a Compose v2 that reports failures are reachable; else the reason, one line."""
    if not shutil.which("docker"):
        return "docker not found on PATH"
    try:
        info = sh("docker", "info", "--format", "{{.ServerVersion}}", timeout=30)
        if info.returncode != 0:
            return f"docker info failed: {first_line(info.stderr)}"
        if sh("docker", "compose", "version", timeout=30).returncode != 0:
            return "docker compose (the Compose v2 plugin) is missing"
        if sh("docker", "compose", "race-lab-no-such-command", timeout=30).returncode == 0:
            return "docker compose exits 0 on a bad subcommand (a wrapper, not the Compose v2 program)"
    except subprocess.TimeoutExpired:
        return "the Docker engine did not answer within 30 s"
    return None


def not_here(reason: str):
    """Skip (a laptop without Docker) or, under CI=true, fail: CI starts an engine, so these tests must run."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but the engine tests cannot run: {reason}", pytrace=False)
    pytest.skip(f"no Docker engine for the engine tests: {reason} (.ci/run starts one)")


def report(request, line: str):
    """Print into the test output even under -q and output capture."""
    with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print(f"\n[engine] {line}", flush=True)


def containers() -> list:
    """This module's Compose project's containers, running or not."""
    proc = sh("docker", "ps", "--all", "--quiet", "--filter", f"label=com.docker.compose.project={PROJECT}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def volumes() -> list:
    """This module's Compose project's volumes."""
    proc = sh("docker", "volume", "ls", "--quiet", "--filter", f"label=com.docker.compose.project={PROJECT}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.fixture(scope="module")
def engine():
    reason = why_no_engine()
    if reason:
        not_here(reason)
    yield
    sh("docker", "compose", "-p", PROJECT, "--profile", "cpu", "--profile", "sweep", "--profile", "nodes-cpu", "down",
       "--remove-orphans", "--volumes", "--timeout", "5", timeout=120)
    left = containers()
    if left:
        sh("docker", "rm", "--force", *left)
    for volume in volumes():
        sh("docker", "volume", "rm", "--force", volume)


@pytest.fixture(scope="module")
def env(engine):
    """What every make and compose call here runs with: this module's project and image tag, the test user."""
    return {**os.environ, "COMPOSE_PROJECT_NAME": PROJECT, "IMAGE_TAG": TAG,
            "HOST_UID": str(UID), "HOST_GID": str(GID), "CHECK_HOST_WAIT_S": "30"}


@pytest.fixture(scope="module")
def base_image(engine, request):
    chosen = os.environ.get("RACE_LAB_TEST_BASE_IMAGE")
    if chosen:
        return chosen
    started = time.monotonic()
    proc = sh("bash", "docker/standin-base.sh", timeout=900, env={**os.environ, "PYTHON": sys.executable})
    if proc.returncode != 0:
        reason = first_line(proc.stderr.splitlines()[-1] if proc.stderr.strip() else proc.stdout)
        if ("debootstrap not found" in reason or "needs root" in reason) and os.environ.get("CI") != "true":
            pytest.skip(f"no stand-in base: {reason}; or set RACE_LAB_TEST_BASE_IMAGE=<a python:3.11 image>")
        pytest.fail(f"docker/standin-base.sh failed: {proc.stderr[-2000:]}", pytrace=False)
    name = proc.stdout.strip().splitlines()[-1]
    report(request, f"stand-in base {name} ready in {time.monotonic() - started:.0f} s")
    return name


@pytest.fixture(scope="module")
def image(env, base_image, request):
    """race-lab:engine-test built by `make build` from docker/Dockerfile on the base; its build time and size."""
    started = time.monotonic()
    proc = sh("make", "--no-print-directory", "build", f"BASE_IMAGE={base_image}", timeout=1800, env=env)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    size = int(sh("docker", "image", "inspect", IMAGE, "--format", "{{.Size}}").stdout)
    report(request, f"make build: {IMAGE} on {base_image} in {seconds:.0f} s (layer cache included); "
                    f"image size {size / 1e9:.2f} GB")
    return {"name": IMAGE, "base": base_image, "build_s": seconds, "size": size}


@pytest.fixture(scope="module")
def runs_dir(engine):
    """runs/engine-tests/<project>/: writable by the container's user 1234, who owns what it writes there."""
    path = ROOT / "runs" / "engine-tests" / PROJECT
    path.mkdir(parents=True)
    path.chmod(0o777)
    yield path
    if os.geteuid() != 0:  # files of uid 1234: removed by that user, in a container
        sh("docker", "run", "--rm", "--user", f"{UID}:{GID}", "--network", "none", "-v", f"{path}:/out",
           "--entrypoint", "find", IMAGE, "/out", "-mindepth", "1", "-delete")
    shutil.rmtree(path, ignore_errors=True)
    for parent in (path.parent, path.parent.parent):
        try:
            parent.rmdir()  # only when empty: runs/ may hold the user's results
        except OSError:
            break


def in_container(path: Path) -> str:
    return "/app/" + str(path.relative_to(ROOT))


def git_head() -> str:
    return sh("git", "rev-parse", "HEAD").stdout.strip()


# --- the image ------------------------------------------------------------------------------------------

def test_the_image_records_the_commit_and_the_lock_and_a_disagreeing_lock_hash_fails_the_build(image, env):
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()
    labels = json.loads(sh("docker", "image", "inspect", IMAGE, "--format", "{{json .Config.Labels}}").stdout)
    assert labels["org.opencontainers.image.revision"] == git_head()
    assert labels["race-lab.lock-sha256"] == digest
    assert labels["org.opencontainers.image.base.name"] == image["base"]
    proc = sh("docker", "run", "--rm", "--network", "none", "--entrypoint", "cat", IMAGE, "/etc/race-lab/image.json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert (info["git_sha"], info["lock_sha256"], info["base_image"]) == (git_head(), digest, image["base"])
    assert info["git_dirty"] == (labels["race-lab.git-dirty"] == "true")

    bad_tag = f"{TAG}-bad-lock"
    proc = sh("docker", "compose", "build", "train", timeout=900,
              env={**env, "IMAGE_TAG": bad_tag, "BASE_IMAGE": image["base"], "LOCK_SHA256": "f" * 64,
                   "GIT_SHA": git_head()})
    assert proc.returncode != 0
    assert f"LOCK_SHA256={'f' * 64} but requirements.lock hashes to {digest}" in proc.stdout + proc.stderr
    assert sh("docker", "image", "inspect", f"race-lab:{bad_tag}").returncode != 0


def assert_quiet_success(proc):
    """A run that succeeded shows its own lines: no echoed Compose command, no stack trace."""
    out = proc.stdout + proc.stderr
    for noise in ("docker compose", "Traceback", "Exception raised from"):
        assert noise not in out, f"{noise!r} on the console of a run that succeeded:\n{out[-3000:]}"


# --- the CPU service end to end -------------------------------------------------------------------------

def test_make_up_cpu_runs_the_race_into_host_runs_owned_by_the_host_user_and_leaves_no_container(
        image, env, runs_dir):
    run_dir = runs_dir / "up-cpu"
    proc = sh("make", "--no-print-directory", "up-cpu", f"ARGS={RUN_ARGS} hydra.run.dir={in_container(run_dir)}",
              timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"  {run_dir.relative_to(ROOT)}/" in proc.stdout.splitlines()  # make names what the run wrote
    assert_quiet_success(proc)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"] == "race"
    assert summary["config"]["world_size"] == 2
    assert summary["environment"]["image"]["git_sha"] == git_head()
    for path in (run_dir, run_dir / "summary.json", run_dir / "events"):
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (UID, GID), path
    assert containers() == []


def test_docker_compose_stop_during_a_run_ends_it_quietly_as_interrupted(image, env, runs_dir, tmp_path):
    """Stopped while its ranks start (the launcher has begun, no rank has trained): the hardest moment."""
    run_dir = runs_dir / "stopped"
    out = tmp_path / "make.out"
    with open(out, "w") as sink:
        make = subprocess.Popen(["make", "--no-print-directory", "up-cpu",
                                 f"ARGS={RUN_ARGS} hydra.run.dir={in_container(run_dir)}"],
                                cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        launcher = run_dir / "events" / "launcher.jsonl"
        deadline = time.monotonic() + 300
        while not (launcher.exists() and "launch_start" in launcher.read_text()):
            assert make.poll() is None, out.read_text()[-3000:]
            assert time.monotonic() < deadline, "the run never started its ranks"
            time.sleep(0.2)
        stop = sh("docker", "compose", "--profile", "cpu", "stop", "cpu", timeout=120, env=env)
        assert stop.returncode == 0, stop.stderr
        make.wait(timeout=120)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
    output = out.read_text()
    # make exits 2 when a recipe fails; the recipe's own status is the run's: 130 for an interrupt
    assert make.returncode != 0
    assert re.search(r"\[Makefile:\d+: up-cpu\] Error 130$", output, re.MULTILINE), output[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    wrong = [f"status {summary['status']!r}"] if summary["status"] != "interrupted" else []
    if summary["verdict"] == "race":  # an interrupted run has no race verdict
        wrong.append(f"verdict 'race' ({summary.get('explanation')})")
    if "Traceback" in output:  # a stop at any moment ends quietly
        wrong.append("a traceback in the output:\n" + output[output.index("Traceback"):][:2000])
    assert not wrong, "; ".join(wrong)
    assert "results in ./runs/" not in output
    assert containers() == []


# --- the GPU services, on a host without GPUs -----------------------------------------------------------

def test_the_gpu_service_asks_the_engine_for_2_nvidia_gpus_and_2_ranks(image, env):
    proc = sh("docker", "compose", "create", "--no-build", "train", timeout=120, env={**env, "GPUS": "2"})
    assert proc.returncode == 0, proc.stderr
    try:
        ids = containers()
        assert len(ids) == 1
        inspected = json.loads(sh("docker", "inspect", ids[0]).stdout)[0]
        requests = inspected["HostConfig"]["DeviceRequests"]
        assert [(r["Driver"], r["Count"], r["Capabilities"]) for r in requests] == [("nvidia", 2, [["gpu"]])]
        assert inspected["Config"]["Cmd"][:2] == ["device=cuda", "world_size=2"]
        assert inspected["Config"]["User"] == f"{UID}:{GID}"
        assert {u["Name"]: u["Hard"] for u in inspected["HostConfig"]["Ulimits"]}["memlock"] == -1
        assert inspected["HostConfig"]["IpcMode"] == "host"
    finally:
        sh("docker", "compose", "rm", "--force", "--stop", "train", timeout=120, env=env)
    assert containers() == []


def test_make_up_without_the_nvidia_toolkit_stops_at_check_host_with_one_line(image, env):
    runtimes = sh("docker", "info", "--format", "{{json .Runtimes}}").stdout
    if '"nvidia"' in runtimes or shutil.which("nvidia-container-runtime-hook"):
        pytest.skip("this host has the NVIDIA Container Toolkit")
    proc = sh("make", "--no-print-directory", "up", "GPUS=2", "NO_BUILD=1", timeout=120, env=env)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the NVIDIA Container Toolkit is missing" in errors[0], proc.stderr
    assert " up " not in proc.stdout and containers() == []


# --- two nodes, two containers, no shared disk -----------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_up_nodes_cpu_two_containers_race_for_a_checkpoint_only_node0s_volume_holds(
        image, env, runs_dir, request):
    """The host network keeps the rendezvous on loopback here; each node's volume is its own disk."""
    run_dir = runs_dir / "nodes"
    started = time.monotonic()
    proc = sh("make", "--no-print-directory", "up-nodes-cpu", "NO_BUILD=1", "NODES_NETWORK=host",
              f"RDZV_PORT={free_port()}", "EPOCHS=1", "SKEW=1",
              f"ARGS=timeout.collective_s=60 hydra.run.dir={in_container(run_dir)}", timeout=600, env=env)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert f"  {run_dir.relative_to(ROOT)}/" in lines  # make names the one run dir
    assert_quiet_success(proc)
    summaries = sorted(run_dir.rglob("summary.json"))
    assert summaries == [run_dir / "summary.json"]  # one verdict for both nodes, merged by node 0
    summary = json.loads(summaries[0].read_text())
    assert summary["verdict"] == "race", summary.get("explanation")
    assert {r["rank"]: r["outcome"] for r in summary["ranks"]} == {0: "loaded", 1: "missing"}
    assert (summary["config"]["scenario"], summary["config"]["nnodes"], summary["config"]["fix"]["name"]) == \
        ("no_shared_fs", 2, "barrier")
    assert [(n["node_rank"], n["status"]) for n in summary["nodes"]] == [(0, "ok"), (1, "ok")]
    for k in (0, 1):  # each node's launcher recorded into the shared run dir, its rank on its own container
        assert (run_dir / "nodes" / f"node{k}" / "node_summary.json").exists()
        start = json.loads((run_dir / "events" / f"rank{k}.jsonl").read_text().splitlines()[0])
        assert (start["event"], start["host"], start["node"]) == ("rank_start", f"node{k}-cpu", k)
    # what each node's own volume held at the end, listed by make from the volumes themselves
    assert "node0-cpu's own disk (its volume, /checkpoints): /checkpoints/node0/best.pth" in lines
    assert "node1-cpu's own disk (its volume, /checkpoints): no checkpoint" in lines
    assert containers() == [] and volumes() == []
    report(request, f"make up-nodes-cpu: two containers, one race, in {seconds:.0f} s")


# --- a sweep on CPU -------------------------------------------------------------------------------------

def test_the_sweep_service_runs_a_2_job_sweep_on_cpu_and_writes_its_report_into_runs(image, env, runs_dir):
    sweep_dir = runs_dir / "sweep"
    proc = sh("make", "--no-print-directory", "sweep-container-cpu", "SWEEP=skew.seconds=0,1 fix=unsynced",
              f"ARGS=world_size=2 epochs=1 hydra.sweep.dir={in_container(sweep_dir)}", timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"  {sweep_dir.relative_to(ROOT)}/" in proc.stdout.splitlines()
    summaries = sorted(sweep_dir.glob("*/summary.json"))
    assert len(summaries) == 2
    assert sorted(json.loads(s.read_text())["config"]["skew"]["seconds"] for s in summaries) == [0, 1]
    rows = (sweep_dir / "report.csv").read_text().splitlines()
    assert len(rows) == 3  # a header and one row per job
    assert "Report:" in (sweep_dir / "report.md").read_text()
    assert sweep_dir.stat().st_uid == UID
    assert containers() == []
