#!/usr/bin/env bash
# zerotrace: prepare this host for bcc-based eBPF probes.
#
# Idempotent; run as root.  Usage: scripts/setup-ebpf.sh [VENV_DIR]
#   - installs bcc + kernel headers from Debian when missing
#   - links /lib/modules/$(uname -r)/{build,source} to the newest installed
#     Debian header tree when the running kernel has no headers of its own
#   - mounts tracefs and debugfs when missing
#   - reports, one line each, what cannot work on this kernel
#   - optionally symlinks the system bcc package into VENV_DIR's site-packages
set -euo pipefail

log() { printf 'zerotrace: %s\n' "$*"; }
die() { printf 'zerotrace: %s\n' "$*" >&2; exit 1; }

if [[ "$(id -u)" -ne 0 ]]; then
    die "root is needed (run: sudo $0${*:+ $*})"
fi

VENV="${1:-}"
KREL="$(uname -r)"
PKGS=(python3-bpfcc libbpfcc bpfcc-tools linux-headers-amd64)
problems=0

# --- 1. packages ---------------------------------------------------------
missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    log "installing bcc from Debian (${missing[*]}) ..."
    export DEBIAN_FRONTEND=noninteractive
    if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
        log "no apt package lists; running apt-get update ..."
        apt-get update -qq >/dev/null
    fi
    if ! apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1; then
        log "package lists stale; running apt-get update ..."
        apt-get update -qq >/dev/null
        apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
else
    log "bcc packages already installed"
fi

# --- 2. kernel headers ---------------------------------------------------
MODDIR="/lib/modules/${KREL}"
if [[ -e "${MODDIR}/build/include/linux/kconfig.h" || -e "${MODDIR}/build/Makefile" ]]; then
    log "kernel headers present at ${MODDIR}/build"
else
    # newest Debian arch header tree, by version sort
    hdr="$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n1 || true)"
    if [[ -z "${hdr}" ]]; then
        die "no /usr/src/linux-headers-*-amd64 found; cannot provide kernel headers"
    fi
    common="${hdr%-amd64}-common"
    log "linking kernel headers for ${KREL} -> ${hdr} ..."
    mkdir -p "${MODDIR}"
    ln -sfn "${hdr}" "${MODDIR}/build"
    if [[ -d "${common}" ]]; then
        ln -sfn "${common}" "${MODDIR}/source"
    fi
    if [[ "$(basename "${hdr}")" != "linux-headers-${KREL}" ]]; then
        log "note: headers are from $(basename "${hdr}"), not ${KREL}; fine for tracepoints/BTF-free probes"
    fi
fi

# --- 3. tracefs / debugfs ------------------------------------------------
is_mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }
if ! is_mounted /sys/kernel/tracing; then
    log "mounting tracefs on /sys/kernel/tracing ..."
    mount -t tracefs nodev /sys/kernel/tracing
fi
if ! is_mounted /sys/kernel/debug; then
    log "mounting debugfs on /sys/kernel/debug ..."
    mount -t debugfs nodev /sys/kernel/debug
fi

# --- 4. optional venv link -----------------------------------------------
if [[ -n "${VENV}" ]]; then
    py="${VENV}/bin/python"
    [[ -x "${py}" ]] || die "no python at ${py}; create the venv first"
    site="$("${py}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    if [[ ! -e "${site}/bcc" ]]; then
        log "linking system bcc into ${site} ..."
        ln -sfn /usr/lib/python3/dist-packages/bcc "${site}/bcc"
    fi
    if ! "${py}" -c 'import bcc' >/dev/null 2>&1; then
        log "WARNING: bcc still not importable from ${py} (python version mismatch with /usr/bin/python3?)"
        problems=$((problems + 1))
    fi
fi

# --- 5. capability report ------------------------------------------------
kcfg() {  # kcfg NAME -> prints y/m/n/?
    local v=""
    if [[ -r /proc/config.gz ]]; then
        v="$(zcat /proc/config.gz | grep -E "^CONFIG_$1=" | cut -d= -f2 || true)"
        echo "${v:-n}"
    elif [[ -r "/boot/config-${KREL}" ]]; then
        v="$(grep -E "^CONFIG_$1=" "/boot/config-${KREL}" | cut -d= -f2 || true)"
        echo "${v:-n}"
    else
        echo "?"
    fi
}
T=/sys/kernel/tracing
have_kprobes=0
if [[ -e "${T}/kprobe_events" ]] || [[ "$(kcfg KPROBES)" == y ]]; then have_kprobes=1; fi
have_uprobes=0;  [[ -e "${T}/uprobe_events" ]] && have_uprobes=1
have_sysc=0;     [[ -d "${T}/events/syscalls/sys_enter_openat" ]] && have_sysc=1
have_btf=0;      [[ -e /sys/kernel/btf/vmlinux ]] && have_btf=1
have_fentry=0
if ((have_btf)) && [[ -e "${T}/available_filter_functions" ]]; then have_fentry=1; fi

usable=()
if ((have_sysc)); then usable+=(tracepoints); else
    log "syscall tracepoints unavailable on this kernel (CONFIG_FTRACE_SYSCALLS unset): file-I/O probe cannot attach"
    problems=$((problems + 1))
fi
if ((have_uprobes)); then usable+=(uprobes); else
    log "uprobes unavailable on this kernel (CONFIG_UPROBE_EVENTS unset): user-space probes disabled"
fi
if ((have_fentry)); then usable+=(fentry); else
    log "fentry/fexit unavailable on this kernel (no BTF or no ftrace): kernel-function probes need kprobes"
fi
if ((have_kprobes)); then usable+=(kprobes); else
    log "kprobes unavailable on this kernel (CONFIG_KPROBES unset): using tracepoints/uprobes/fentry instead"
fi
if ! command -v ldconfig >/dev/null || ! ldconfig -p 2>/dev/null | grep -q libbcc.so; then
    log "libbcc not found by the dynamic linker: bcc probes cannot load"
    problems=$((problems + 1))
fi

if ((problems)); then
    log "setup finished with ${problems} blocking problem(s); usable: ${usable[*]:-none}"
    exit 1
fi
log "ready: kernel ${KREL}, probes via ${usable[*]}"
