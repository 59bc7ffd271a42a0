#!/usr/bin/env bash
# Installs requirements.lock into a venv: what make install (tools/install-venv.sh) and docker/Dockerfile run.
#
#   install-lock.sh PYTHON LOCK [PIP OPTIONS...]     PYTHON: the venv's interpreter
#
# Every package of the lock comes as a wheel but deepspeed, which is published as an sdist only (0.19.8). pip
# builds an sdist before it installs anything, in an isolated environment without torch, where DeepSpeed's setup
# cannot run. So: first every other line of the lock (wheel, einops, hjson, msgpack, ninja and py-cpuinfo among
# them), then deepspeed alone, without deps (they are pinned in the lock) and built against the torch just
# installed (--no-build-isolation), never from pip's wheel cache (a wheel cached from another build's settings):
#   DS_BUILD_OPS=0        no op is compiled ahead of time (DeepSpeed JIT-compiles an op the first time it is used)
#   DS_BUILD_SHM_COMM=1   but its CPU communication op, deepspeed_shm_comm, is: every deepspeed.initialize on
#                         DS_ACCELERATOR=cpu loads it (deepspeed/comm/torch.py, build_shm_op), and no setting turns
#                         that off; left to the JIT, the first 2-rank run on a fresh machine pays its compile
#                         (141 s measured) into ~/.cache/torch_extensions. Built here, it is paid once, by install.
#   DS_ACCELERATOR=cpu    the accelerator its ops are built for (the adapter runs with the same)
# DS_BUILD_SHM_COMM from the environment wins: docker/Dockerfile passes 0, as its images have no C++ compiler (the
# op is for the CPU accelerator; on GPUs DeepSpeed never loads it).
set -euo pipefail
python=${1:?usage: install-lock.sh PYTHON LOCK [PIP OPTIONS...]} lock=${2:?usage: install-lock.sh PYTHON LOCK}
shift 2
sdists='^deepspeed=='  # the lock's lines that have no wheel
"$python" -m pip install "$@" -r <(grep -v "$sdists" "$lock")
grep -q "$sdists" "$lock" || exit 0
DS_BUILD_OPS=0 DS_BUILD_SHM_COMM=${DS_BUILD_SHM_COMM:-1} DS_ACCELERATOR=cpu \
    "$python" -m pip install "$@" --no-cache-dir --no-deps --no-build-isolation $(grep "$sdists" "$lock" | sed "s/[[:space:]]*#.*//")
