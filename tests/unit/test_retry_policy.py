"""Every exporter's retry rules (zerotrace_query/retry_policy.py): the backoff, Retry-After
(capped when asked), which HTTP answers are tried again, the attempt loop with its two limits
(a deadline, a number of attempts), and the one-line errors of a request that did not go."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from zerotrace.errors import ConfigError, TransientIO
from zerotrace_query.retry_policy import (
    RETRY_429_AND_5XX,
    Backoff,
    Budget,
    Ending,
    Failure,
    at_most,
    connection_failure,
    http_failure,
    http_wait_s,
    keep_trying,
    not_sent,
    one_line,
    retries_note,
    retry_after_s,
    send_within,
    within,
)

pytestmark = pytest.mark.unit
S = 1_000_000_000
# Wed, 21 Oct 2015 07:28:00 GMT
DATE_NS = 1_445_412_480 * S
OTLP_LIST = frozenset({429, 502, 503, 504})


class Clock:
    """A clock that only sleeping moves."""

    def __init__(self) -> None:
        self.ns = 0
        self.waits: list[float] = []

    def now_ns(self) -> int:
        return self.ns

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.ns += int(seconds * S)


def script(*outcomes: str | Failure) -> tuple[list[int], Callable[[int], str | Failure]]:
    """An attempt function answering `outcomes` in turn; the attempt numbers it saw."""
    seen: list[int] = []

    def attempt_once(attempt: int) -> str | Failure:
        seen.append(attempt)
        return outcomes[len(seen) - 1]

    return seen, attempt_once


def test_the_backoff_grows_by_its_factor_up_to_its_cap() -> None:
    assert [Backoff().delay_s(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 32, 32]
    assert [Backoff(0.5, 2, 30).delay_s(n) for n in (1, 2, 3, 6, 7)] == [0.5, 1, 2, 16, 30]


def test_a_budget_allows_waits_that_end_by_its_deadline() -> None:
    assert Budget(10 * S).allows(7 * S, 3.0) is True
    assert Budget(10 * S).allows(7 * S, 3.5) is False


def test_retry_after_in_seconds_or_as_a_date_and_capped_only_when_asked() -> None:
    assert retry_after_s(" 120 ", 0) == 120.0
    assert retry_after_s("86400", 0, most_s=300) == 300.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", DATE_NS - 7 * S) == 7.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", DATE_NS - 900 * S, 300) == 300.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", DATE_NS + 60 * S, 300) == 0.0
    for unreadable in (None, "", "soon", "-5", "²", "Wed, 21 Oct 2015 07:28:00"):
        assert retry_after_s(unreadable, DATE_NS) is None


def test_an_answer_is_waited_for_only_when_its_status_is_in_the_list() -> None:
    assert http_wait_s(500, None, 3, 0, Backoff(), RETRY_429_AND_5XX) == 4.0
    assert http_wait_s(599, "7", 1, 0, Backoff(), RETRY_429_AND_5XX) == 7.0
    assert http_wait_s(503, "900", 1, 0, Backoff(), RETRY_429_AND_5XX, most_s=300) == 300.0
    assert http_wait_s(500, "7", 1, 0, Backoff(), OTLP_LIST) is None
    for final in (400, 401, 404, 413, 600):
        assert http_wait_s(final, "7", 1, 0, Backoff(), RETRY_429_AND_5XX) is None


def test_failures_say_what_happened_in_one_line() -> None:
    assert http_failure(503, "busy", "2", 1, 0, Backoff(), OTLP_LIST) == Failure(
        "HTTP 503: busy", 2.0
    )
    refused = http_failure(400, "", None, 1, 0, Backoff(), OTLP_LIST)
    assert refused == Failure("HTTP 400", None) and refused.final
    assert connection_failure(ConnectionRefusedError("no"), 3, Backoff()) == Failure(
        "ConnectionRefusedError: no", 4.0
    )
    assert one_line("  line one\n\tline   two ") == "line one line two"
    assert one_line("x" * 500) == "x" * 200


def test_keep_trying_waits_as_each_failure_asks_until_an_attempt_goes_through() -> None:
    clock = Clock()
    seen, attempt_once = script(Failure("HTTP 503", 2.0), Failure("reset", 1.0), "taken")
    ending = keep_trying(attempt_once, within(clock.now_ns, 60), clock.sleep)
    assert ending == Ending(3, taken="taken") and ending.retries == 2
    assert (seen, clock.waits) == ([1, 2, 3], [2.0, 1.0])


def test_a_final_failure_ends_at_once() -> None:
    clock = Clock()
    seen, attempt_once = script(Failure("HTTP 503", 1.0), Failure("HTTP 400"))
    ending = keep_trying(attempt_once, within(clock.now_ns, 60), clock.sleep)
    assert ending == Ending(2, failure=Failure("HTTP 400"))
    assert (seen, clock.waits) == ([1, 2], [1.0])


def test_within_gives_up_before_a_wait_that_would_end_past_the_deadline() -> None:
    clock = Clock()
    seen, attempt_once = script(*(Failure("down", w) for w in (1.0, 2.0, 4.0, 8.0)))
    ending = keep_trying(attempt_once, within(clock.now_ns, 10), clock.sleep)
    assert ending == Ending(4, failure=Failure("down", 8.0))
    assert (seen, clock.waits) == ([1, 2, 3, 4], [1.0, 2.0, 4.0])  # 7 s waited; 8 more: 15 > 10


def test_at_most_stops_after_that_many_attempts_however_short_the_waits() -> None:
    clock = Clock()
    seen, attempt_once = script(*(Failure("down", 0.0) for _ in range(5)))
    ending = keep_trying(attempt_once, at_most(3), clock.sleep)
    assert ending == Ending(3, failure=Failure("down", 0.0)) and seen == [1, 2, 3]


def test_not_sent_is_a_config_error_when_refused_and_transient_when_given_up() -> None:
    def zipkin(failure: Failure, attempts: int) -> ConfigError | TransientIO:
        return not_sent(
            failure,
            attempts,
            refused="Zipkin at http://z refused the spans",
            gave_up="Zipkin export to http://z gave up",
            within_s=10.0,
            before="3 spans were sent before",
        )

    refused = zipkin(Failure("HTTP 400: bad"), 1)
    assert isinstance(refused, ConfigError) and str(refused) == (
        "Zipkin at http://z refused the spans (HTTP 400: bad); not retried,"
        " 3 spans were sent before."
    )
    away = zipkin(Failure("ConnectError: refused", 8.0), 4)
    assert isinstance(away, TransientIO) and str(away) == (
        "Zipkin export to http://z gave up after 4 attempts within 10 s"
        " (last: ConnectError: refused); 3 spans were sent before."
    )
    once = zipkin(Failure("HTTP 503", 90.0), 1)
    assert "gave up after 1 attempt within 10 s" in str(once)


def test_retries_in_a_summary_line() -> None:
    assert [retries_note(n) for n in (0, 1, 2)] == ["", ", 1 retry", ", 2 retries"]


def test_send_within_returns_how_it_went_or_raises_the_one_line() -> None:
    clock = Clock()
    words = {"refused": "X refused the spans", "gave_up": "X export gave up", "before": "0 sent"}
    _, attempt_once = script(Failure("HTTP 429", 3.0), "taken")
    ending = send_within(attempt_once, clock.now_ns, clock.sleep, 60, **words)
    assert ending == Ending(2, taken="taken") and clock.waits == [3.0]
    _, attempt_once = script(Failure("HTTP 413"))
    with pytest.raises(ConfigError, match=r"^X refused the spans \(HTTP 413\); not retried"):
        send_within(attempt_once, clock.now_ns, clock.sleep, 60, **words)
    _, attempt_once = script(Failure("HTTP 503", 61.0))
    with pytest.raises(TransientIO, match=r"^X export gave up after 1 attempt within 60 s"):
        send_within(attempt_once, clock.now_ns, clock.sleep, 60, **words)
