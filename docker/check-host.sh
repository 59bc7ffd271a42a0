#!/usr/bin/env bash
# Checks what the container and GPU targets need from this host, in the order given. Prints nothing
# when all is there; otherwise one line on stderr naming what is missing, and exits 1. Never waits long.
#
#   check-host.sh compose      docker and the Compose v2 plugin (`docker compose`)
#   check-host.sh nvidia       the Docker engine answers and can hand GPUs to containers
#                              (an nvidia runtime in `docker info`, or the toolkit's hook on PATH)
#   check-host.sh gpus=N       N is a whole number >= 1 and this host has at least N GPUs (nvidia-smi -L)
#
# e.g. check-host.sh compose nvidia gpus=3
set -u
WAIT_S=${CHECK_HOST_WAIT_S:-30}

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
        fail "check-host.sh: unknown check '$check' (compose, nvidia, gpus=N)"
        ;;
    esac
done
exit 0
