#!/usr/bin/env bash
# Checks what the container and GPU targets need from this host, in the order given. Prints nothing
# when all is there; otherwise one line on stderr naming what is missing, and exits 1. Never waits long.
#
#   check-host.sh compose      docker and the Compose v2 plugin (`docker compose`), which must report
#                              failures (a bad subcommand fails; a wrapper that always exits 0 does not)
#   check-host.sh nvidia       the Docker engine answers and can hand GPUs to containers
#                              (an nvidia runtime in `docker info`, or the toolkit's hook on PATH)
#   check-host.sh gpus=N       N is a whole number >= 1 and this host has at least N GPUs (nvidia-smi -L)
#   check-host.sh disk         the engine's data root has room to build the image (BUILD_DISK_GIB, default
#                              16: the image is about 7 GB and the build needs about as much again);
#                              passes when $IMAGE exists already or the data root is not on this host
#   check-host.sh image        the image $IMAGE exists (what NO_BUILD=1 runs)
#   check-host.sh base         after a failed build: fails when the base image ($BASE_IMAGE, else the
#                              Dockerfile's) is neither here nor pullable, pointing to docker/standin-base.sh
#   check-host.sh memlock=N    the engine can start $IMAGE with a locked-memory limit of N bytes (-1:
#                              unlimited), as the GPU services ask for NCCL
#
# e.g. check-host.sh compose nvidia gpus=3
set -u
WAIT_S=${CHECK_HOST_WAIT_S:-30}
IMAGE=${IMAGE:-race-lab:latest}
HERE=$(dirname "$0")

fail() { echo "error: $*" >&2; exit 1; }

gpu_count() {  # sets HOST_GPUS from nvidia-smi -L, or fails
    command -v nvidia-smi >/dev/null 2>&1 ||
        fail "nvidia-smi not found: this host has no NVIDIA driver (make up-cpu runs the image without GPUs)"
    local out rc=0
    out=$(timeout "$WAIT_S" nvidia-smi -L 2>&1) || rc=$?
    [ "$rc" -ne 124 ] || fail "nvidia-smi -L did not answer within ${WAIT_S} s: the NVIDIA driver is not healthy"
    [ "$rc" -eq 0 ] || fail "nvidia-smi -L failed (exit $rc): $(printf '%s' "$out" | head -n 1)"
    HOST_GPUS=$(printf '%s\n' "$out" | grep -c '^GPU ')
}

for check in "$@"; do
    case "$check" in
    compose)
        command -v docker >/dev/null 2>&1 ||
            fail "docker not found: install Docker Engine and its Compose plugin (docs.docker.com/engine/install)"
        timeout "$WAIT_S" docker compose version >/dev/null 2>&1 ||
            fail "docker compose (the Compose v2 plugin) is missing: install docker-compose-plugin" \
                 "(docs.docker.com/compose/install/linux); docker-compose v1 does not do GPUs this way"
        ! timeout "$WAIT_S" docker compose race-lab-no-such-command >/dev/null 2>&1 ||
            fail "docker compose exits 0 on a bad subcommand, so failures would look like success: link" \
                 "the Compose v2 program itself as the plugin, not a wrapper script (e.g. .venv/bin/docker-compose)"
        ;;
    disk)
        docker image inspect "$IMAGE" >/dev/null 2>&1 && continue
        root=$(timeout "$WAIT_S" docker info --format '{{.DockerRootDir}}' 2>/dev/null) || continue
        [ -d "$root" ] || continue  # a remote engine or a VM's (Docker Desktop): its disk is not ours to see
        need=${BUILD_DISK_GIB:-16}
        free=$(df -Pk "$root" | awk 'NR == 2 {print int($4 / 1048576)}')
        [ "$free" -ge "$need" ] ||
            fail "only ${free} GiB free under ${root} (the Docker engine's data root): building ${IMAGE}" \
                 "needs about ${need} GiB (the image is about 7 GB); free some space or set BUILD_DISK_GIB="
        ;;
    image)
        docker image inspect "$IMAGE" >/dev/null 2>&1 ||
            fail "image ${IMAGE} not found: build it first (make build), or drop NO_BUILD=1 to build it when missing"
        ;;
    base)
        base=${BASE_IMAGE:-$(sed -n 's/^ARG BASE_IMAGE=//p' "$HERE/Dockerfile")}
        docker image inspect "$base" >/dev/null 2>&1 && continue
        rc=0
        out=$(timeout "$WAIT_S" docker pull --quiet "$base" 2>&1) || rc=$?
        [ "$rc" -ne 0 ] || continue  # it can be had: the build failed for another reason, which it printed
        [ "$rc" -ne 124 ] || out="no answer within ${WAIT_S} s"
        fail "cannot pull the base image ${base} ($(printf '%s' "$out" | head -n 1)): without a registry," \
             "build on a local one: make ${TARGET:-build} BASE_IMAGE=\$(bash docker/standin-base.sh)" \
             "(README: Without access to an image registry)"
        ;;
    memlock=*)
        memlock=${check#memlock=}
        rc=0
        out=$(timeout "$WAIT_S" docker run --rm --network none --ulimit "memlock=${memlock}" \
              --entrypoint true "$IMAGE" 2>&1) || rc=$?
        [ "$rc" -ne 124 ] || fail "a test container did not start within ${WAIT_S} s: is the Docker engine healthy?"
        case "$out" in
        *rlimit*) fail "the Docker engine cannot set the locked-memory limit MEMLOCK=${memlock} that NCCL asks" \
                       "for (its own hard limit is lower, as under rootless Docker): raise the engine's limit" \
                       "(LimitMEMLOCK=infinity for docker.service) or set MEMLOCK= to a byte count it allows" ;;
        esac
        [ "$rc" -eq 0 ] || fail "cannot start ${IMAGE} with --ulimit memlock=${memlock}: $(printf '%s' "$out" | head -n 1)"
        ;;
    nvidia)
        rc=0
        runtimes=$(timeout "$WAIT_S" docker info --format '{{json .Runtimes}}' 2>&1) || rc=$?
        [ "$rc" -ne 124 ] || fail "docker info did not answer within ${WAIT_S} s: is the Docker engine running?"
        [ "$rc" -eq 0 ] || fail "cannot reach the Docker engine: $(printf '%s' "$runtimes" | head -n 1)"
        case "$runtimes" in
        *'"nvidia"'*) ;;
        *) command -v nvidia-container-runtime-hook >/dev/null 2>&1 ||
               fail "the NVIDIA Container Toolkit is missing (no nvidia runtime in docker info):" \
                    "install nvidia-container-toolkit, then sudo nvidia-ctk runtime configure --runtime=docker" \
                    "&& sudo systemctl restart docker" ;;
        esac
        ;;
    gpus=*)
        gpus=${check#gpus=}
        gpu_count
        [ "$HOST_GPUS" -ge 1 ] || fail "this host has no GPU (nvidia-smi -L lists none)"
        [[ "$gpus" =~ ^[0-9]+$ ]] && [ "$gpus" -ge 1 ] ||
            fail "GPUS=${gpus}: must be a whole number >= 1 (the GPUs to use, one rank each)"
        [ "$gpus" -le "$HOST_GPUS" ] ||
            fail "GPUS=${gpus} but this host has ${HOST_GPUS} GPU(s) (nvidia-smi -L): use GPUS=${HOST_GPUS} or fewer"
        ;;
    *)
        fail "check-host.sh: unknown check '$check' (compose, nvidia, gpus=N, disk, image, base, memlock=N)"
        ;;
    esac
done
exit 0
