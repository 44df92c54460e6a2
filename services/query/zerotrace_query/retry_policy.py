"""When an exporter sends a request again, after how long, and when it stops (pure).

Every exporter that pushes to another tool (OTLP, Zipkin, Pyroscope) tries a request the
same way, and this module is that way, once:

- An attempt either goes through or fails with a `Failure`: one line saying what happened,
  and the wait before the next attempt, or none when the answer is final (a 400 means the
  receiver will never take these bytes).
- An HTTP answer is tried again when its status is in the exporter's list (OTLP names 429,
  502, 503 and 504; Zipkin and Pyroscope take 429 and every 5xx), after the `Retry-After`
  the receiver sent (seconds, or an HTTP date), else after the exporter's `Backoff`. A
  connection that failed (refused, reset, timed out) is tried again as a 503 would be.
- `keep_trying` runs the attempts: it waits while the exporter's limit allows the next wait
  (`within`: one deadline for all attempts of a request; `at_most`: a number of attempts)
  and says how it ended; the exporter turns that into its own one-line error.

No jitter: one exporter run by a person or a cron job, not a fleet that would retry in step.
Time and sleep are injected, so tests need no real waits.
"""

from __future__ import annotations

import email.utils
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from zerotrace.errors import ConfigError, TransientIO

NS_PER_S = 1_000_000_000
# Zipkin's and Pyroscope's list: too many requests, and any server error.
RETRY_429_AND_5XX = frozenset({429, *range(500, 600)})
# How much of a receiver's error body goes into the one line.
REASON_CHARS = 200

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """The wait when the receiver named none: `first_s`, times `factor` after each failed
    attempt, at most `most_s` (1 s doubling to 32 s is the OpenTelemetry SDKs' schedule)."""

    first_s: float = 1.0
    factor: float = 2.0
    most_s: float = 32.0

    def delay_s(self, attempt: int) -> float:
        """The wait after failed attempt number `attempt` (1 for the first)."""
        return float(min(self.first_s * self.factor ** max(attempt - 1, 0), self.most_s))


@dataclass(frozen=True)
class Budget:
    """One request's attempts share this deadline (ns, on the exporter's clock)."""

    deadline_ns: int

    def allows(self, now_ns: int, wait_s: float) -> bool:
        return now_ns + int(wait_s * NS_PER_S) <= self.deadline_ns


def retry_after_s(value: str | None, now_ns: int, most_s: float | None = None) -> float | None:
    """A Retry-After header's wait in seconds (never below 0, at most `most_s` when given):
    delta-seconds, or an HTTP date against `now_ns`; None when absent or unreadable (then the
    backoff decides)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        asked = float(text)
    else:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:  # an HTTP date is GMT; a zone-less one is read the same way
            return None
        asked = max(when.timestamp() - now_ns / NS_PER_S, 0.0)
    return asked if most_s is None else min(asked, most_s)


def http_wait_s(
    status: int,
    retry_after: str | None,
    attempt: int,
    now_ns: int,
    backoff: Backoff,
    retryable: frozenset[int],
    most_s: float | None = None,
) -> float | None:
    """How long to wait before sending again after this HTTP answer (Retry-After capped at
    `most_s` when given, else the backoff); None: do not, the status is not `retryable`."""
    if status not in retryable:
        return None
    asked = retry_after_s(retry_after, now_ns, most_s)
    return backoff.delay_s(attempt) if asked is None else asked


@dataclass(frozen=True)
class Failure:
    """One attempt that did not go through: what happened, in one line, and the wait before
    the next attempt; `wait_s` None: the answer is final, never sent again."""

    description: str
    wait_s: float | None = None

    @property
    def final(self) -> bool:
        return self.wait_s is None


def http_failure(
    status: int,
    reason: str,
    retry_after: str | None,
    attempt: int,
    now_ns: int,
    backoff: Backoff,
    retryable: frozenset[int],
) -> Failure:
    """An HTTP error answer as a Failure: "HTTP 503: <reason>", waited as http_wait_s says."""
    description = f"HTTP {status}" + (f": {reason}" if reason else "")
    return Failure(
        description, http_wait_s(status, retry_after, attempt, now_ns, backoff, retryable)
    )


def connection_failure(error: BaseException, attempt: int, backoff: Backoff) -> Failure:
    """A connection refused, reset or timed out: tried again after the backoff, as a 503
    without Retry-After would be."""
    return Failure(f"{type(error).__name__}: {error}", backoff.delay_s(attempt))


def one_line(text: str) -> str:
    """A receiver's error body as part of one line: blanks squeezed, REASON_CHARS at most."""
    return " ".join(text.split())[:REASON_CHARS]


@dataclass(frozen=True)
class Ending(Generic[T]):
    """How a request's attempts ended, after `attempts` of them: taken (`failure` None, and
    `taken` what the last attempt returned), refused for good (`failure.final`), or given up
    (the last failure's wait was not allowed)."""

    attempts: int
    taken: T | None = None
    failure: Failure | None = None

    @property
    def retries(self) -> int:
        return self.attempts - 1


def keep_trying(
    attempt_once: Callable[[int], T | Failure],
    may_wait: Callable[[int, float], bool],
    sleep: Callable[[float], None],
) -> Ending[T]:
    """Calls `attempt_once(attempt)` (1, 2, ...) until it returns something other than a
    Failure, or a final Failure, or `may_wait(attempt, wait_s)` refuses the next wait;
    `sleep(wait_s)` between attempts."""
    attempt = 1
    while True:
        outcome = attempt_once(attempt)
        if not isinstance(outcome, Failure):
            return Ending(attempt, taken=outcome)
        if outcome.wait_s is None or not may_wait(attempt, outcome.wait_s):
            return Ending(attempt, failure=outcome)
        sleep(outcome.wait_s)
        attempt += 1


def within(now_ns: Callable[[], int], give_up_after_s: float) -> Callable[[int, float], bool]:
    """A `may_wait` for keep_trying: every attempt ends within `give_up_after_s` of now; a
    wait that would end past that is not waited."""
    budget = Budget(now_ns() + int(give_up_after_s * NS_PER_S))
    return lambda _attempt, wait_s: budget.allows(now_ns(), wait_s)


def at_most(attempts: int) -> Callable[[int, float], bool]:
    """A `may_wait` for keep_trying: `attempts` attempts at most, however long the waits."""
    return lambda attempt, _wait_s: attempt < attempts


def not_sent(
    failure: Failure,
    attempts: int,
    *,
    refused: str,
    gave_up: str,
    within_s: float,
    before: str,
) -> ConfigError | TransientIO:
    """The one-line error of a request that did not go through in the time allowed:
    ConfigError "<refused> (<why>); not retried, <before>." when the answer was final,
    TransientIO "<gave_up> after N attempts within S s (last: <why>); <before>." otherwise."""
    if failure.final:
        return ConfigError(f"{refused} ({failure.description}); not retried, {before}.")
    return TransientIO(
        f"{gave_up} after {attempts} attempt{'s' if attempts != 1 else ''} within"
        f" {within_s:g} s (last: {failure.description}); {before}."
    )


def send_within(
    attempt_once: Callable[[int], T | Failure],
    now_ns: Callable[[], int],
    sleep: Callable[[float], None],
    give_up_after_s: float,
    *,
    refused: str,
    gave_up: str,
    before: str,
) -> Ending[T]:
    """keep_trying `within` give_up_after_s: how the attempts ended when the request went
    through; else raises not_sent's one line (ConfigError or TransientIO)."""
    ending = keep_trying(attempt_once, within(now_ns, give_up_after_s), sleep)
    if ending.failure is not None:
        raise not_sent(
            ending.failure,
            ending.attempts,
            refused=refused,
            gave_up=gave_up,
            within_s=give_up_after_s,
            before=before,
        )
    return ending


def retries_note(retries: int) -> str:
    """What a summary line adds for `retries`: ", 2 retries", ", 1 retry", or "" for none."""
    if not retries:
        return ""
    return f", {retries} retr{'ies' if retries != 1 else 'y'}"
