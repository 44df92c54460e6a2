"""TCP capture options shared by `zerotrace run` and `zerotrace collector` (process-name and
cgroup filters, payload bytes): arguments, and their translation into the socket probe's
keyword arguments (checked here, so a bad value is one line before anything is compiled)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from zerotrace import settings
from zerotrace.errors import ConfigError

if TYPE_CHECKING:
    from zerotrace_collector.redaction import Redactor


def add_socket_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--process",
        default="",
        metavar="NAME",
        help="only TCP traffic of processes whose name starts with NAME (the name in "
        "/proc/PID/comm, at most 15 characters, e.g. python3 or vllm)",
    )
    p.add_argument(
        "--cgroup",
        default="",
        metavar="PATH",
        help="only TCP traffic of processes in this cgroup v2 directory or below it: absolute, "
        "or relative to the cgroup2 mount (e.g. system.slice/vllm.service, or a pod's "
        "kubepods/... directory for all its containers)",
    )
    p.add_argument(
        "--payload-bytes",
        type=int,
        default=16384,
        metavar="N",
        help="bytes of payload copied per read or write call, a power of two in 64..32768 "
        "(default 16384: a streamed token's SSE event is a few hundred bytes; a call that "
        "moves more is cut and counted as truncated)",
    )
    add_content_argument(p)


def add_content_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--keep-content",
        action="store_true",
        default=None,
        help="keep prompt and completion text in what is published and stored (default: "
        "masked with same-length filler, so token counts and timings still work; or set "
        "ZEROTRACE_KEEP_CONTENT=1). Credentials (Authorization, cookies, API keys, "
        "token-shaped values) are masked either way",
    )


def redactor(args: argparse.Namespace) -> Redactor:
    """What masks credentials, and content unless --keep-content (or its setting) says not."""
    from zerotrace_collector.redaction import Redactor
    from zerotrace_collector.settings import CollectorSettings

    chosen = settings.load(CollectorSettings, keep_content=getattr(args, "keep_content", None))
    return Redactor(keep_content=chosen.keep_content)


def socket_options(args: argparse.Namespace) -> dict[str, Any]:
    """The SocketProbe keyword arguments for --process, --cgroup and --payload-bytes."""
    from zerotrace_collector.cgroup import cgroup2_of_path
    from zerotrace_collector.probes.socket import COMM_PREFIX, check_payload_max

    if args.process and not COMM_PREFIX.fullmatch(args.process):
        raise ConfigError(
            f"--process {args.process!r}: 1 to 15 characters of letters, digits and _.:/@+- "
            "(the kernel keeps 15 characters of a process name)"
        )
    cgroup = None
    if args.cgroup:
        try:
            cgroup = cgroup2_of_path(args.cgroup)
        except ValueError as exc:
            raise ConfigError(f"--cgroup: {exc}") from None
    try:
        check_payload_max(args.payload_bytes)
    except ValueError:
        raise ConfigError(
            f"--payload-bytes {args.payload_bytes}: must be a power of two in 64..32768"
        ) from None
    return {"comm_prefix": args.process, "cgroup": cgroup, "payload_max": args.payload_bytes}
