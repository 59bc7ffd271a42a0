#!/usr/bin/env bash
# A STAND-IN for docker/Dockerfile's base image, for tests and for hosts that cannot reach an image
# registry (the pinned python:3.11-slim-bookworm cannot be pulled there). Never the default: pass it
# explicitly, e.g.  make build BASE_IMAGE=$(bash docker/standin-base.sh)
#
# What it is: a Debian bookworm rootfs from debootstrap --variant=minbase (Debian's python3 is included
# only for the shared libraries a CPython needs), with this host's own CPython 3.11 copied into
# /usr/local (Debian's 3.11.2 cannot install the lock, which needs >= 3.11.5), and this host's CA
# bundle (a proxy's CA included) so that pip can reach the package registry during the build.
# It is loaded with `docker import`. Its Python is whatever this host has: a stand-in, not a release base.
#
#   bash docker/standin-base.sh            prints the image name, building it only when it is missing
#
# Needs: root, debootstrap, a reachable Debian mirror, a reachable Docker engine, and PYTHON (default:
# python3.11 on PATH) a CPython >= 3.11.5 built for glibc. The rootfs tarball is cached in
# ${RACE_LAB_CACHE:-~/.cache/race-lab}, so a new engine (a fresh CI data root) imports it again in seconds.
set -euo pipefail

fail() { echo "error: standin-base.sh: $*" >&2; exit 1; }

PYTHON=${PYTHON:-python3.11}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${RACE_LAB_CACHE:-${HOME:-/root}/.cache/race-lab}
command -v docker >/dev/null 2>&1 || fail "docker not found"
command -v "$PYTHON" >/dev/null 2>&1 || fail "$PYTHON not found: set PYTHON= to a CPython >= 3.11.5"
read -r PY_VERSION PY_PREFIX < <("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3], sys.base_prefix)')
case "$PY_VERSION" in
3.11.*) [ "${PY_VERSION#3.11.}" -ge 5 ] || fail "$PYTHON is $PY_VERSION: the lock needs Python >= 3.11.5" ;;
*) fail "$PYTHON is $PY_VERSION: the image needs Python 3.11 (>= 3.11.5)" ;;
esac
[ -x "$PY_PREFIX/bin/python3.11" ] || fail "$PY_PREFIX/bin/python3.11 missing: $PYTHON is not a relocatable CPython prefix"

IMAGE=${STANDIN_IMAGE:-race-lab-standin:bookworm-py$PY_VERSION}
if docker image inspect "$IMAGE" >/dev/null 2>&1; then echo "$IMAGE"; exit 0; fi

TARBALL="$CACHE/standin-bookworm-py$PY_VERSION.tar"
if [ ! -s "$TARBALL" ]; then
    [ "$(id -u)" -eq 0 ] || fail "debootstrap needs root (run as root, or import a cached $TARBALL)"
    command -v debootstrap >/dev/null 2>&1 || fail "debootstrap not found: apt-get install debootstrap"
    mkdir -p "$CACHE"
    WORK=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
    ROOTFS="$WORK/rootfs"
    echo "standin-base.sh: debootstrap bookworm into $ROOTFS (about a minute)" >&2
    debootstrap --variant=minbase --include=python3,ca-certificates,passwd bookworm "$ROOTFS" "$MIRROR" \
        > "$WORK/debootstrap.log" 2>&1 || { tail -n 5 "$WORK/debootstrap.log" >&2; fail "debootstrap failed"; }

    # The host's CPython, without its installed packages, tests and caches: the image makes its own venv.
    tar -C "$PY_PREFIX" --exclude='lib/python3.11/site-packages/*' --exclude='lib/python3.11/test' \
        --exclude='__pycache__' -cf - bin/python3.11 bin/python3 lib include | tar -C "$ROOTFS/usr/local" -xf -
    ln -sf python3.11 "$ROOTFS/usr/local/bin/python"
    ln -sf python3.11 "$ROOTFS/usr/local/bin/python3"
    chroot "$ROOTFS" /sbin/ldconfig

    # This host's extra CAs (e.g. a proxy's), so pip in the build trusts what the host trusts.
    if [ -d /usr/local/share/ca-certificates ]; then
        cp -a /usr/local/share/ca-certificates/. "$ROOTFS/usr/local/share/ca-certificates/"
    fi
    chroot "$ROOTFS" /usr/sbin/update-ca-certificates >/dev/null 2>&1 || fail "update-ca-certificates failed"
    chroot "$ROOTFS" /usr/local/bin/python -c 'import ssl, ctypes, sqlite3, lzma, bz2, zlib, venv, ensurepip' ||
        fail "the copied Python $PY_VERSION does not run in the bookworm rootfs (a library is missing)"
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    tar -C "$ROOTFS" --numeric-owner -cf "$TARBALL.tmp" . && mv "$TARBALL.tmp" "$TARBALL"
fi

docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'LABEL race-lab.standin="debootstrap bookworm minbase + host CPython, for tests"' \
    --change 'CMD ["python3"]' \
    "$TARBALL" "$IMAGE" >/dev/null || fail "docker import of $TARBALL failed"
echo "$IMAGE"
