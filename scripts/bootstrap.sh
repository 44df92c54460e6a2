#!/usr/bin/env bash
# Sets up everything zerotrace needs on a fresh Debian machine, idempotently and quietly when
# there is nothing to do: the Python virtual environment (.venv) from requirements.lock, the
# project's import paths, and (as root) bcc with kernel headers via scripts/setup-ebpf.sh.
# Kafka and OpenSearch jars are resolved later, by `zerotrace infra up`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${ZEROTRACE_PYTHON:-python3}"
say() { echo "zerotrace: $*" >&2; }

if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  say "needs Python >= 3.11 as '$PY' (set ZEROTRACE_PYTHON to another interpreter)"; exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  say "creating the virtual environment in .venv"
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.lock-$(sha256sum "$ROOT/requirements.lock" | cut -c1-16)"
if [ ! -e "$STAMP" ]; then
  say "installing Python packages from requirements.lock (first run: about a minute)"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/requirements.lock"
  rm -f "$VENV"/.lock-*; touch "$STAMP"
fi
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# The shared library and each service's package, importable without installing them.
{
  echo "$ROOT/lib"
  echo "$ROOT/cli"
  for d in collector correlator profiler-agg query; do echo "$ROOT/services/$d"; done
} > "$SITE/zerotrace-dev.pth"
cat > "$VENV/bin/zerotrace" <<LAUNCH
#!/bin/sh
exec "$VENV/bin/python" -m zerotrace_cli "\$@"
LAUNCH
chmod +x "$VENV/bin/zerotrace"

EBPF_STAMP="$VENV/.ebpf-ok-$(uname -r)"
if [ "$(id -u)" = 0 ] && [ "${ZEROTRACE_SKIP_EBPF:-0}" != 1 ]; then
  # Quiet once it worked for this kernel, as long as tracefs is still mounted (not after boot).
  if [ ! -e "$EBPF_STAMP" ] || [ ! -d /sys/kernel/tracing/events ] || [ ! -e "$SITE/bcc" ]; then
    if bash "$ROOT/scripts/setup-ebpf.sh" "$VENV"; then
      touch "$EBPF_STAMP"
    else
      say "eBPF set-up is incomplete (see above); everything but the collector still works"
    fi
  fi
elif [ "$(id -u)" != 0 ]; then
  say "not root: skipping eBPF set-up (bcc, kernel headers); the collector will need root"
fi
