"""Pushes to Grafana Pyroscope's ingest API over HTTP (the shell over pyroscope_export): one
POST per push, tried again on 429 and 5xx answers and on connection failures, waiting what
the server's Retry-After asks or else a doubling backoff (retry_policy's loop, with
pyroscope_export's numbers).

Contract: `push` returns when the server accepted the push (2xx); raises ConfigError when it
refused it for good (another 4xx: a bad name, a missing tenant, a wrong URL), TransientIO when
it still failed after `attempts` tries. It blocks while it waits; `sleep` and `now` are
injected so tests need no real waits.
"""

from __future__ import annotations

import base64
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from zerotrace.errors import ConfigError, TransientIO
from zerotrace.store import Store
from zerotrace_query import retry_policy
from zerotrace_query.documents import PROFILES
from zerotrace_query.pyroscope_export import FOLDED_TYPES, Push, backoff_s, push_for, wait_s
from zerotrace_query.window_read import documents

ATTEMPTS = 6  # 0.5 + 1 + 2 + 4 + 8 s of backoff between them when the server names no wait
TIMEOUT_S = 30.0
TENANT_HEADER = "X-Scope-OrgID"


def _utc_now() -> datetime:
    return datetime.now(UTC)


class PyroscopeClient:
    """The ingest API at `endpoint` (e.g. http://127.0.0.1:4040; user:password@ in the URL is
    sent as basic authentication, as Grafana Cloud wants); `tenant` sets X-Scope-OrgID for a
    multi-tenant server."""

    def __init__(
        self,
        endpoint: str,
        tenant: str = "",
        attempts: int = ATTEMPTS,
        timeout_s: float = TIMEOUT_S,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], datetime] = _utc_now,
    ) -> None:
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"--endpoint {endpoint!r}: give Pyroscope's base URL, e.g. http://127.0.0.1:4040"
            )
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        self.base = urllib.parse.urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))
        self._headers: dict[str, str] = {}
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        if tenant:
            self._headers[TENANT_HEADER] = tenant
        self.attempts, self.timeout_s = attempts, timeout_s
        self._sleep, self._now = sleep, now
        self.retries = 0  # tries beyond the first, over all pushes

    def push(self, push: Push) -> None:
        ending = retry_policy.keep_trying(
            lambda attempt: self._attempt(push, attempt),
            retry_policy.at_most(self.attempts),
            self._sleep,
        )
        self.retries += ending.retries
        failure = ending.failure
        if failure is not None and failure.final:
            raise ConfigError(
                f"Pyroscope at {self.base} refused {push.name} ({push.window_id}): "
                f"{failure.description}"
            )
        if failure is not None:
            raise TransientIO(
                f"Pyroscope at {self.base} did not take {push.name} after {ending.attempts}"
                f" tries: {failure.description}"
            )

    def _attempt(self, push: Push, attempt: int) -> retry_policy.Failure | None:
        """One POST: None when the server took it, else what went wrong and the wait."""
        request = urllib.request.Request(
            f"{self.base}/ingest?{push.query}",
            data=push.body,
            method="POST",
            headers={**self._headers, "Content-Type": push.content_type},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
                return None
        except urllib.error.HTTPError as exc:
            reason = _first_line(exc.read())
            wait = wait_s(exc.code, exc.headers.get("Retry-After"), attempt, self._now())
            return retry_policy.Failure(f"HTTP {exc.code} {reason or exc.reason}", wait)
        except (urllib.error.URLError, OSError) as exc:
            return retry_policy.Failure(str(getattr(exc, "reason", exc)), backoff_s(attempt))


def _first_line(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    return text.splitlines()[0][:200] if text else ""


@dataclass
class PyroscopeExport:
    """What an export pushed: windows per profile type, and those left out."""

    endpoint: str
    pushed: Counter[str] = field(default_factory=Counter)
    empty: int = 0  # windows without a stack with a weight
    unsupported: Counter[str] = field(default_factory=Counter)  # types the format cannot carry
    retries: int = 0

    @property
    def windows(self) -> int:
        return sum(self.pushed.values())

    def summary(self) -> str:
        kinds = ", ".join(f"{n:,} {t}" for t, n in sorted(self.pushed.items()))
        line = f"pyroscope: {self.windows:,} profile windows pushed to {self.endpoint}"
        line += f" ({kinds})" if kinds else ""
        if self.retries:
            line += f", {self.retries:,} pushes tried again"
        if self.empty:
            line += f"; {self.empty:,} empty windows skipped"
        if self.unsupported:
            left = ", ".join(f"{n:,} {t}" for t, n in sorted(self.unsupported.items()))
            line += f"; left out, no folded type in Pyroscope: {left} (use pprof)"
        return line


def export_window(
    store: Store,
    from_ns: int,
    to_ns: int,
    client: PyroscopeClient,
    push_format: str,
    sample_hz: int,
    progress: Callable[[int], None] = lambda pushed: None,
) -> PyroscopeExport:
    """Push every profile window that starts in [from_ns, to_ns), one push each, in time
        order; `sample_hz` is the on-CPU sampling rate the profiles were taken at (Pyroscope's
    sampleRate); `progress(pushed)` after each push. Raises what PyroscopeClient.push raises (the
        pushes before stay pushed: Pyroscope takes a window pushed twice as two profiles, so a
        re-run should start after the last window pushed, which the error names)."""
    result = PyroscopeExport(client.base)
    for window in documents(store, PROFILES, from_ns, to_ns):
        push = push_for(window, push_format, sample_hz)
        if push is None:
            if push_format == "folded" and window["profile_type"] not in FOLDED_TYPES:
                result.unsupported[str(window["profile_type"])] += 1
            else:
                result.empty += 1
            continue
        client.push(push)
        result.pushed[push.profile_type] += 1
        result.retries = client.retries
        progress(result.windows)
    return result
