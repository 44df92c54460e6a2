#!/usr/bin/env bash
# zerotrace: prepare the GPU device check (bench/gpu_device_check.py) for the lent device
# machine, and print the one `run` call that does it there.
#
# Run here (this machine has the network; the device machine has none), from the repo root:
#   scripts/device-gpu-check.sh [WHEEL_DIR]        (default: .whl, ignored through
#                                                  .git/info/exclude, as the device README says)
# It downloads, for the device's Python (3.12, x86-64), only the wheels the check imports that
# the device image lacks or has in another version (its python3 has PyTorch and nvidia-ml-py):
#   fastavro      the Avro codec: each record encoded and decoded as the collector does
#   nvidia-ml-py  pynvml, pinned to requirements.lock's version (the image's may differ)
#   pyelftools    the probed CUDA entry points read from the libraries the workload mapped
# about 4 MB in all; the working tree that travels with them is checked against 64 MiB.
#
# Then give the device tool this (one call, about 1-2 minutes of device time):
#   run  carry: [".whl"]  timeout_s: 300  command:
#     python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:lib:services/collector:
#     services/profiler-agg:cli:services/correlator:services/query PYTHONUNBUFFERED=1 || exit;
#     nvidia-smi -q > $OUT/nvidia-smi.txt 2>&1; timeout -k 10 220 python3 -m
#     bench.gpu_device_check --out $OUT
# (one line: the script prints it exactly). What comes back: report.txt (also the output),
# report.json, records.jsonl, windows.json, workloads.log, nvidia-smi.txt, and
# zerotrace-run.log or hang.txt where those happened. Give the machine back after it.
set -euo pipefail

cd "$(dirname "$0")/.."
WHL="${1:-.whl}"
PY_VERSION=3.12 # the device's python3 (KINDS.md: Python 3.12.3, /opt/torch/.venv)
WHEELS=(fastavro nvidia-ml-py pyelftools)
LIMIT_MIB=64

log() { printf 'zerotrace: %s\n' "$*"; }
die() { printf 'zerotrace: %s\n' "$*" >&2; exit 1; }

pinned() { # NAME -> NAME==VERSION from requirements.lock
    local line
    line="$(grep -i "^$1==" requirements.lock || true)"
    [[ -n "$line" ]] || die "$1 is not pinned in requirements.lock"
    printf '%s' "$line"
}

if [[ "$WHL" == ".whl" ]] && ! git check-ignore -q .whl/x.whl 2>/dev/null; then
    echo '/.whl/' >>.git/info/exclude
    log "added /.whl/ to .git/info/exclude"
fi
mkdir -p "$WHL"
specs=()
for name in "${WHEELS[@]}"; do specs+=("$(pinned "$name")"); done
# Only the pinned versions: two versions of one package stop the install there.
for name in "${WHEELS[@]}"; do
    keep="$(pinned "$name" | tr '-' '_' | sed 's/==/-/')"
    find "$WHL" -maxdepth 1 -iname "$(printf '%s' "$name" | tr '-' '_')-*.whl" \
        ! -iname "${keep}-*" -delete
done
log "downloading ${specs[*]} for CPython $PY_VERSION x86-64 into $WHL ..."
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d "$WHL" "${specs[@]}"

wheels_kib="$(du -sk "$WHL" | cut -f1)"
tree_kib="$( (git ls-files -z; git ls-files -z --others --exclude-standard) |
    xargs -0 du -ck 2>/dev/null | tail -n1 | cut -f1)"
total_mib=$(((wheels_kib + tree_kib) / 1024))
log "wheels ${wheels_kib} KiB + working tree ${tree_kib} KiB = ${total_mib} MiB (limit $LIMIT_MIB)"
((total_mib < LIMIT_MIB - 8)) || die "too close to the ${LIMIT_MIB} MiB the device tool carries"

SITE="/tmp/site"
PATHS="$SITE:lib:services/collector:services/profiler-agg:cli:services/correlator:services/query"
COMMAND="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade"
COMMAND+=" --target $SITE $WHL/*.whl && export PYTHONPATH=$PATHS PYTHONUNBUFFERED=1 || exit;"
COMMAND+=' nvidia-smi -q > $OUT/nvidia-smi.txt 2>&1;'
COMMAND+=' timeout -k 10 220 python3 -m bench.gpu_device_check --out $OUT'
log "give the device tool one call: run with carry [\"$WHL\"], timeout_s 300, command:"
printf '%s\n' "$COMMAND"
