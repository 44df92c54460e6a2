"""The test harness's comparison of zerotrace's figures with the clients' truth: what counts
as right at the client, and how the server's stamps widen that for a point on the wire."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness.accuracy import compare

pytestmark = pytest.mark.unit

MS = 1_000_000


def truth(**changes: Any) -> dict[str, Any]:
    t = {
        "model": "m-1",
        "error": None,
        "stream": True,
        "output_tokens": 3,
        "sent_ns": 1_000 * MS,
        "sent_done_ns": 1_000 * MS,
        "token_ns": [1_060 * MS, 1_070 * MS, 1_080 * MS],
        "token_wait_ns": [0, 0, 0],
    }
    return {**t, **changes}


def record(ttft_ms: float, tpot_ms: float = 10.0, point: str = "NETWORK") -> dict[str, Any]:
    return {
        "model": "m-1",
        "observation_point": point,
        "output_tokens": 3,
        "ttft_ns": int(ttft_ms * MS),
        "tpot_ns": int(tpot_ms * MS),
        "error": None,
    }


def stamps(first_ms: float, last_ms: float) -> dict[str, dict[str, int]]:
    """The server got the request at 1 001 ms and began its first and last sends then."""
    at = 1_001 * MS
    return {
        "m-1": {
            "request_ns": at,
            "first_ns": at + int(first_ms * MS),
            "last_ns": at + int(last_ms * MS),
        }
    }


def problems(rec: dict[str, Any], server: dict[str, dict[str, int]] | None = None) -> list[str]:
    return compare([truth()], [rec], "NETWORK", server=server)


def test_within_two_ms_of_the_client_is_right() -> None:
    assert problems(record(61.5)) == []
    assert problems(record(58.1)) == []
    assert len(problems(record(57.5))) == 1


def test_the_server_stamps_bound_a_wire_figure_from_below() -> None:
    # 5 ms earlier than the client saw it: right only if the server sent it that early.
    assert len(problems(record(55.0))) == 1
    assert problems(record(55.0), server=stamps(54.0, 74.0)) == []
    assert len(problems(record(55.0), server=stamps(57.5, 77.5))) == 1


def test_the_server_stamps_widen_the_tpot_window_by_the_wire_bounds() -> None:
    # Client gaps: 10 ms per token. Server first send at 1 055, last at 1 079: a wire TPOT
    # may be anywhere from (1 079 - 1 060) / 2 to (1 080 - 1 055) / 2 ms.
    wide = stamps(54.0, 78.0)
    assert problems(record(60.0, 12.4), server=wide) == []
    assert len(problems(record(60.0, 12.4))) == 1
    assert len(problems(record(60.0, 15.0), server=wide)) == 1
