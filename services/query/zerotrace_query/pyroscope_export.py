"""Profile windows as pushes to Grafana Pyroscope's ingest API (pure): the query string and the
body of each push, and how long to wait before trying one again.

One push per stored profile window (a service's process on a node, one profile type, one
window): `POST /ingest?name=APP{node=N,pid=P,profile_type=T}&from=S&until=S&format=...`,
APP the service. Threads are merged (the `thread:<tid>` frame dropped), as the flame graph
API merges them by default.

- pprof (the default): the body is the gzipped profile.proto of profile_formats.pprof_bytes,
  its sample type naming the profile type (samples/count, off_cpu/nanoseconds,
  alloc_space/bytes, inuse_space/bytes, launches/count, gpu_time/nanoseconds), so every
  profile type goes as it is and Pyroscope keeps the name as the service's name.
- folded (`frame;frame;frame weight` lines): Pyroscope reads the profile type from the name's
  last dot-separated part (APP.cpu, APP.alloc_space, APP.inuse_space) and knows no type for
  off-CPU time, GPU time or GPU launches, so only ON_CPU and the GPU memory types can go
  folded; the others are left out and counted.

Pyroscope parses the name itself: an application name keeps [A-Za-z0-9_.-/] (anything else
becomes '_'), a label value ends at ',' or '}' and loses surrounding blanks (both become '_').
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from zerotrace_query import retry_policy
from zerotrace_query.flame_graph import FlameFilter, merge_windows
from zerotrace_query.profile_formats import folded_text, pprof_bytes

NS_PER_S = 1_000_000_000
FORMATS = ("pprof", "folded")
SPY_NAME = "zerotrace"
PPROF_CONTENT_TYPE = "application/octet-stream"
FOLDED_CONTENT_TYPE = "text/plain"
# Profile type -> (name suffix Pyroscope reads the type from, units, aggregation) for folded.
FOLDED_TYPES: dict[str, tuple[str, str, str]] = {
    "ON_CPU": ("cpu", "samples", "sum"),
    "GPU_MEM_ALLOC": ("alloc_space", "bytes", "sum"),
    "GPU_MEM_INUSE": ("inuse_space", "bytes", "average"),
}
# Retries (retry_policy's rules): statuses worth another try, and the waits between tries.
RETRY_STATUSES = retry_policy.RETRY_429_AND_5XX
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
BACKOFF = retry_policy.Backoff(first_s=FIRST_BACKOFF_S, most_s=MAX_BACKOFF_S)
# A Retry-After longer than this is cut to it: an export waits, but not for hours.
MAX_RETRY_AFTER_S = 300.0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_APP_RUNE = re.compile(r"[A-Za-z0-9_./-]")


@dataclass(frozen=True)
class Push:
    """One ingest request: its query parameters (in order) and body."""

    params: tuple[tuple[str, str], ...]
    body: bytes
    content_type: str
    window_id: str
    profile_type: str
    service: str

    @property
    def query(self) -> str:
        return urlencode(self.params)

    @property
    def name(self) -> str:
        return dict(self.params)["name"]


def app_name(service: str) -> str:
    """A service as a Pyroscope application name."""
    name = "".join(c if _APP_RUNE.fullmatch(c) else "_" for c in service.strip())
    return name or "unknown"


def label_value(value: object) -> str:
    text = re.sub(r"[,{}]", "_", str(value)).strip()
    return text or "unknown"


def series_name(app: str, labels: Mapping[str, object]) -> str:
    """'app{k=v,...}', labels sorted by key."""
    inner = ",".join(f"{key}={label_value(labels[key])}" for key in sorted(labels))
    return f"{app}{{{inner}}}"


def push_for(window: Mapping[str, Any], push_format: str, sample_hz: int) -> Push | None:
    """The push of one profile window document, or None when there is nothing to push (no
    stack with a weight) or its type cannot go in this format (folded: FOLDED_TYPES)."""
    profile_type = str(window["profile_type"])
    if push_format == "folded" and profile_type not in FOLDED_TYPES:
        return None
    merged = merge_windows([window], FlameFilter(profile_type=profile_type))
    if not merged.stacks:
        return None
    start, end = int(window["window_start_ns"]), int(window["window_end_ns"])
    service = str(window["service"])
    labels = {"node": window["node_id"], "pid": window.get("pid") or 0}
    app = app_name(service)
    if push_format == "folded":
        suffix, units, aggregation = FOLDED_TYPES[profile_type]
        name = series_name(f"{app}.{suffix}", {**labels, "profile_type": profile_type})
        body = folded_text(merged.stacks).encode()
        extra: list[tuple[str, str]] = [("units", units), ("aggregationType", aggregation)]
        content_type = FOLDED_CONTENT_TYPE
    else:
        name = series_name(app, {**labels, "profile_type": profile_type})
        body = pprof_bytes(merged.stacks, profile_type, time_ns=start, duration_ns=end - start)
        extra, content_type = [], PPROF_CONTENT_TYPE
    params = [
        ("name", name),
        ("from", str(start // NS_PER_S)),
        ("until", str(max(math.ceil(end / NS_PER_S), start // NS_PER_S + 1))),
        ("format", push_format),
        ("spyName", SPY_NAME),
    ]
    if profile_type == "ON_CPU":  # the only type sampled at a rate
        params.append(("sampleRate", str(sample_hz)))
    return Push(
        tuple(params + extra), body, content_type, str(window["window_id"]), profile_type, service
    )


def retry_after_s(header: str | None, now: datetime) -> float | None:
    """Seconds a Retry-After header asks to wait (delta-seconds or an HTTP date, at most
    MAX_RETRY_AFTER_S); None when there is none or it cannot be read."""
    return retry_policy.retry_after_s(header, _ns(now), MAX_RETRY_AFTER_S)


def backoff_s(attempt: int) -> float:
    """The wait after failed try number `attempt` (1, 2, ...) when the server names none."""
    return BACKOFF.delay_s(attempt)


def wait_s(status: int, header: str | None, attempt: int, now: datetime) -> float | None:
    """How long to wait before pushing again after this HTTP answer: the Retry-After asked
    (at most MAX_RETRY_AFTER_S), else the backoff; None: the answer is final."""
    return retry_policy.http_wait_s(
        status, header, attempt, _ns(now), BACKOFF, RETRY_STATUSES, MAX_RETRY_AFTER_S
    )


def _ns(when: datetime) -> int:
    """ns since the epoch, exactly (to the microsecond a datetime holds)."""
    return (when - _EPOCH) // timedelta(microseconds=1) * 1_000
