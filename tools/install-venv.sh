#!/usr/bin/env bash
# make install's first step: VENV with requirements.lock's packages, then the STAMP file.
#
#   install-venv.sh VENV STAMP       PYTHON (in the environment): the interpreter to build with; empty:
#                                    the first that fits of python3.11, python3.12, python3.13, python3
#
# A VENV whose own Python fits (tools/check-python.sh) is updated in place. Anything else there (one
# built by a Python out of range, or a build that was killed) is replaced. A new VENV that fails to
# build is removed, so the next make install starts clean. (It is built where it will stay, not moved
# into place: a venv's scripts hold its absolute path.)
set -u
venv=${1:?usage: install-venv.sh VENV STAMP} stamp=${2:?usage: install-venv.sh VENV STAMP}
check=$(dirname "$0")/check-python.sh
unfinished=$venv/.unfinished  # there from the start of a new build to its end

fits() { [ -x "$venv/bin/python" ] && [ ! -e "$unfinished" ] && bash "$check" "$venv/bin/python" >/dev/null 2>&1; }

if ! fits; then
    python=$(bash "$check" ${PYTHON:-python3.11 python3.12 python3.13 python3}) || exit 2
    if [ -L "$venv" ]; then  # someone else's venv: never ours to remove
        echo "error: $venv links to $(readlink "$venv"), which is not a finished venv of a Python that fits;" \
             "remove the link (make distclean) and make install again" >&2
        exit 2
    fi
    if [ -e "$venv" ]; then
        if [ -e "$unfinished" ]; then why="its build did not finish"
        elif was=$("$venv/bin/python" -c 'import platform; print(platform.python_version())' 2>/dev/null); then
            why="its Python is $was"
        else why="it has no working Python"; fi
        echo "replacing $venv ($why) with a new one from $python" >&2
        rm -rf "$venv"
    fi
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap '[ -e "$stamp" ] || { rm -rf "$venv"; echo "make install failed: removed the unfinished $venv" >&2; }' EXIT
    mkdir -p "$venv" && touch "$unfinished" && "$python" -m venv "$venv" || exit 1
fi

"$venv/bin/python" -m pip install --quiet --upgrade pip || exit 1
bash "$(dirname "$0")/install-lock.sh" "$venv/bin/python" requirements.lock --quiet || exit 1  # deepspeed: an sdist
rm -f "$venv"/.installed-* "$unfinished" && touch "$stamp"
