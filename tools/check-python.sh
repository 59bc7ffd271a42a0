#!/usr/bin/env bash
# Finds a Python that can install requirements.lock: CPython MIN <= version < BELOW on Linux x86_64,
# with venv. Tries each candidate in order (a command or a path), prints the first good one's path
# on stdout and exits 0; when none is good, one line on stderr saying what is needed, and exit 2.
#
#   check-python.sh python3.11 python3.12 python3      the first of these that fits
#
# The range was found by installing the lock and running the seed race: 3.11.7, 3.12.1 and 3.13.0 do;
# 3.11.2 cannot (soupsieve==4.1.3 needs 3.11.5), nor 3.10 (numpy 2.4 needs 3.11). pyproject.toml's
# requires-python says the same.
set -u
MIN=3.11.5
BELOW=3.14

# Run by each candidate, so it parses on old Pythons too. Prints the version, then "ok" and the real
# interpreter's path (not pyenv's shim), or what is wrong.
PROBE="
import platform, sys
v = sys.version_info[:3]
why = []
if ($(echo $MIN | tr . ,)) <= v < ($(echo $BELOW | tr . ,)):
    if platform.python_implementation() != 'CPython':
        why.append('is ' + platform.python_implementation())
    if (platform.system(), platform.machine()) != ('Linux', 'x86_64'):
        why.append('on ' + platform.system() + ' ' + platform.machine())
    try:
        import ensurepip, venv
    except ImportError:
        why.append('without venv (Debian: apt install python%d.%d-venv)' % v[:2])
    why = why or ['ok', sys.executable]
print(' '.join(['%d.%d.%d' % v] + why))
"

[ $# -gt 0 ] || { echo "usage: check-python.sh PYTHON..." >&2; exit 2; }
found=()
for candidate in "$@"; do
    path=$(command -v "$candidate" 2>/dev/null) || { found+=("$candidate not found"); continue; }
    out=$(timeout 20 "$path" -c "$PROBE" 2>/dev/null | tail -n 1)
    case "$out" in
    *" ok "*) echo "${out#* ok }"; exit 0 ;;
    "") found+=("$candidate does not start") ;;
    *) found+=("$candidate is $out") ;;
    esac
done
list=$(printf '%s, ' "${found[@]}")
echo "error: make install needs CPython >=$MIN,<$BELOW on Linux x86_64, the range requirements.lock installs on;" \
     "found: ${list%, }; install one and pass it: make install PYTHON=/path/to/python3.12" >&2
exit 2
