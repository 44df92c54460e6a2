"""Zipkin export of a time window (the I/O shell): read, link, map, send, retry.

`export_window` reads the spans that started in [from, to) with the links trace assembly wrote
around them, linked as every view links them (window_read.linked_spans, which calls
trace_trees.link), maps each to a Zipkin v2 span (zipkin_spans) and POSTs them as JSON, a
batch at a time, to {endpoint}/api/v2/spans. Zipkin answers 202 and stores on its own time.

Retries: 429 and 5xx answers, and connections that failed (refused, reset, timed out), are
sent again after the Retry-After the server gave (seconds or an HTTP date), else after
retry_policy's backoff (1 s doubling to 32 s), while the batch's time (`give_up_after_s`)
lasts. Any other answer is final: a 400 means Zipkin will never take these bytes.

Errors, each one line: ConfigError for a bad endpoint or window, or Zipkin's final refusal;
TransientIO when Zipkin stayed away or busy past the time allowed. Both say how many spans
were sent before. A span Zipkin could not read (ids that are not hex) is left out and
counted in the summary, not sent: one bad span would make Zipkin refuse its whole batch.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from zerotrace.clock import Clock, SystemClock
from zerotrace.errors import ConfigError, PoisonInput
from zerotrace.store import Store
from zerotrace_query import retry_policy, window_read, zipkin_spans
from zerotrace_query.retry_policy import Backoff

DEFAULT_PORT = 9411
SPANS_PATH = "/api/v2/spans"
CONTENT_TYPE = "application/json"
# Spans per POST: about 1 KiB each as JSON, far below the body size Zipkin's HTTP collector
# takes, and small enough that a retried batch costs little.
BATCH_SPANS = 500
RETRYABLE = retry_policy.RETRY_429_AND_5XX  # 429 and every 5xx
MAX_REASONS = 3  # distinct reasons for left-out spans kept for the summary


@dataclass
class ZipkinExport:
    """What an export did: `spans` sent (and accepted), in `batches` requests, after
    `retries` repeated attempts; `skipped` spans left out, with the first reasons."""

    target: str
    spans: int = 0
    batches: int = 0
    retries: int = 0
    skipped: int = 0
    reasons: list[str] = field(default_factory=list)

    def summary(self) -> str:
        line = (
            f"Zipkin {self.target}: {self.spans} span{_s(self.spans)} sent in "
            f"{self.batches} request{_s(self.batches)}"
        )
        line += retry_policy.retries_note(self.retries)
        if self.skipped:
            line += f", {self.skipped} left out ({'; '.join(self.reasons)})"
        return line


def spans_url(endpoint: str) -> str:
    """The URL to POST to, from "host[:port]" (port 9411 when none is given) or an http(s)
    URL (its scheme's port when none is given: a proxy in front of Zipkin, say): the endpoint
    with /api/v2/spans added, unless it ends so already."""
    text = endpoint.strip()
    if not text:
        raise ConfigError("The Zipkin endpoint is empty: give host[:port] or a URL.")
    bare = "://" not in text
    parts = urllib.parse.urlsplit(f"http://{text}" if bare else text)
    try:
        port = parts.port
    except ValueError as bad:
        raise ConfigError(f"The Zipkin endpoint {endpoint!r} has a bad port: {bad}.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"The Zipkin endpoint {endpoint!r} is not host[:port] or an http(s) URL.")
    if port is None and bare:
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        parts = parts._replace(netloc=f"{host}:{DEFAULT_PORT}")
    path = parts.path.rstrip("/")
    if not path.endswith(SPANS_PATH):
        path += SPANS_PATH
    return urllib.parse.urlunsplit(parts._replace(path=path, query="", fragment=""))


def retry_wait_s(
    status: int, retry_after: str | None, attempt: int, now_ns: int, backoff: Backoff
) -> float | None:
    """How long to wait before sending again after this answer; None: do not (pure)."""
    return retry_policy.http_wait_s(status, retry_after, attempt, now_ns, backoff, RETRYABLE)


def export_window(
    store: Store,
    from_ns: int,
    to_ns: int,
    endpoint: str,
    *,
    headers: Mapping[str, str] | None = None,
    batch_spans: int = BATCH_SPANS,
    timeout_s: float = 10.0,
    give_up_after_s: float = 60.0,
    backoff: Backoff | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ZipkinExport:
    """Sends every span that started in [from_ns, to_ns), linked into its trace, to the Zipkin
    server at `endpoint`. `headers` go with every request. Blocks until all are sent; raises
    ConfigError or TransientIO with one line (module docstring)."""
    if to_ns <= from_ns:
        raise ConfigError("The export window is empty: '--to' must be after '--from'.")
    if batch_spans < 1:
        raise ConfigError("A Zipkin batch must hold at least one span.")
    sender = _Sender(
        spans_url(endpoint),
        dict(headers or {}),
        timeout_s,
        backoff or Backoff(),
        clock or SystemClock(),
        sleep,
        give_up_after_s,
    )
    result = ZipkinExport(sender.url)
    batch: list[dict[str, Any]] = []
    try:
        for span in window_read.linked_spans(store, from_ns, to_ns):
            try:
                batch.append(zipkin_spans.zipkin_span(span))
            except PoisonInput as bad:
                result.skipped += 1
                if bad.reason not in result.reasons and len(result.reasons) < MAX_REASONS:
                    result.reasons.append(bad.reason)
                continue
            if len(batch) >= batch_spans:
                sender.deliver(batch, result)
                batch = []
        if batch:
            sender.deliver(batch, result)
    finally:
        sender.close()
    return result


class _Sender:
    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        timeout_s: float,
        backoff: Backoff,
        clock: Clock,
        sleep: Callable[[float], None],
        give_up_after_s: float,
    ) -> None:
        self.url = url
        self._client = httpx.Client(
            timeout=timeout_s, headers={**headers, "Content-Type": CONTENT_TYPE}
        )
        self._backoff = backoff
        self._clock = clock
        self._sleep = sleep
        self._give_up_after_s = give_up_after_s

    def deliver(self, batch: list[dict[str, Any]], result: ZipkinExport) -> None:
        """POSTs one batch until Zipkin takes it; counts it in `result`."""
        body = zipkin_spans.encode(batch)
        ending = retry_policy.send_within(
            lambda attempt: self._attempt(body, attempt),
            self._clock.now_ns,
            self._sleep,
            self._give_up_after_s,
            refused=f"Zipkin at {self.url} refused the spans",
            gave_up=f"Zipkin export to {self.url} gave up",
            before=f"{result.spans} span{_s(result.spans)} were sent before",
        )
        result.retries += ending.retries
        result.spans += len(batch)
        result.batches += 1

    def _attempt(self, body: bytes, attempt: int) -> retry_policy.Failure | None:
        """None when Zipkin took the batch, else what went wrong and the wait before the
        next attempt (retry_policy.Failure)."""
        try:
            response = self._client.post(self.url, content=body)
        except httpx.TransportError as error:  # refused, reset, timed out: as a 503 would be
            return retry_policy.connection_failure(error, attempt, self._backoff)
        if response.is_success:
            return None
        return retry_policy.http_failure(
            response.status_code,
            retry_policy.one_line(response.text),
            response.headers.get("retry-after"),
            attempt,
            self._clock.now_ns(),
            self._backoff,
            RETRYABLE,
        )

    def close(self) -> None:
        self._client.close()


def _s(count: int) -> str:
    return "" if count == 1 else "s"
