"""When an OTLP export is sent again (zerotrace_query/otlp_retry.py): OTLP's retryable HTTP
statuses and gRPC codes, Retry-After in seconds or as a date, RetryInfo in a google.rpc.Status
(the only way RESOURCE_EXHAUSTED is retried), the backoff schedule, and one deadline for all
attempts of a request."""

from __future__ import annotations

import pytest

from zerotrace_query.otlp_retry import (
    GRPC_STATUS_DETAILS_KEY,
    Backoff,
    Budget,
    grpc_wait_s,
    http_wait_s,
    retry_after_s,
    retry_info_delay_s,
    rpc_status,
    status_message,
)

pytestmark = pytest.mark.unit
S = 1_000_000_000
# Wed, 21 Oct 2015 07:28:00 GMT
DATE_NS = 1_445_412_480 * S


def test_backoff_doubles_from_one_second_to_at_most_32() -> None:
    assert [Backoff().delay_s(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 32, 32]
    assert Backoff(first_s=0.25, factor=3, most_s=5).delay_s(3) == 2.25


def test_retry_after_in_seconds_or_as_an_http_date() -> None:
    assert retry_after_s("1", 0) == 1.0
    assert retry_after_s(" 120 ", 0) == 120.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", DATE_NS - 7 * S) == 7.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", DATE_NS + 60 * S) == 0.0  # past
    assert retry_after_s(None, 0) is None
    assert retry_after_s("", 0) is None
    assert retry_after_s("soon", 0) is None
    assert retry_after_s("-5", 0) is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00", DATE_NS) is None  # no zone


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_http_retryable_statuses_honour_retry_after(status: int) -> None:
    assert http_wait_s(status, "3", 1, 0, Backoff()) == 3.0
    assert http_wait_s(status, None, 3, 0, Backoff()) == 4.0  # no header: the backoff


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 415, 500, 501])
def test_other_http_answers_are_final(status: int) -> None:
    assert http_wait_s(status, "1", 1, 0, Backoff()) is None


@pytest.mark.parametrize(
    "code",
    ["CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE", "DATA_LOSS"],
)
def test_grpc_retryable_codes_back_off_or_take_the_servers_delay(code: str) -> None:
    assert grpc_wait_s(code, None, 2, Backoff()) == 2.0
    assert grpc_wait_s(code, 0.5, 2, Backoff()) == 0.5


def test_resource_exhausted_is_retried_only_with_retry_info() -> None:
    assert grpc_wait_s("RESOURCE_EXHAUSTED", None, 1, Backoff()) is None
    assert grpc_wait_s("RESOURCE_EXHAUSTED", 4.0, 1, Backoff()) == 4.0


@pytest.mark.parametrize(
    "code",
    ["INVALID_ARGUMENT", "UNAUTHENTICATED", "PERMISSION_DENIED", "UNIMPLEMENTED", "INTERNAL"],
)
def test_other_grpc_codes_are_final(code: str) -> None:
    assert grpc_wait_s(code, 1.0, 1, Backoff()) is None


def test_retry_info_travels_in_a_google_rpc_status() -> None:
    details = rpc_status(8, "queue full", 2.5)
    assert retry_info_delay_s(details) == 2.5
    assert status_message(details) == "queue full"
    assert retry_info_delay_s(rpc_status(14, "down")) is None
    assert retry_info_delay_s(None) is None
    assert retry_info_delay_s(b"\xff\xff\xff") is None  # not a Status
    assert status_message(b"\xff\xff\xff") == ""
    assert GRPC_STATUS_DETAILS_KEY.endswith("-bin")  # gRPC sends binary trailers so named


def test_google_rpc_status_wire_format() -> None:
    """Field for field as google/rpc/status.proto and error_details.proto: code 1, message 2,
    details 3 (Any: type_url 1, value 2), RetryInfo.retry_delay 1 (Duration: seconds 1)."""
    assert rpc_status(14, "x") == bytes([0x08, 14, 0x12, 1]) + b"x"
    delay = rpc_status(0, "", 3.0)
    url = b"type.googleapis.com/google.rpc.RetryInfo"
    retry_info = bytes([0x0A, 2, 0x08, 3])  # retry_delay { seconds: 3 }
    any_value = bytes([0x0A, len(url)]) + url + bytes([0x12, len(retry_info)]) + retry_info
    assert delay == bytes([0x1A, len(any_value)]) + any_value


def test_a_budget_allows_waits_that_end_by_its_deadline() -> None:
    budget = Budget(deadline_ns=10 * S)
    assert budget.allows(7 * S, 3.0)
    assert not budget.allows(7 * S, 3.5)
