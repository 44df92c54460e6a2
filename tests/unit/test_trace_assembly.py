"""Trace assembly's rules (zerotrace_correlator/trace_assembly.py): the client's and the
server's span of one exchange joined by the request's TCP sequence number (or, with none,
the one request on the connection at that time); a thread's calls inside the request it
serves; a multiplexed thread's links taken back; propagated ids on any thread; spans let go
after the hold."""

from __future__ import annotations

from typing import Any

import pytest

from zerotrace import names
from zerotrace_correlator import trace_assembly as ta
from zerotrace_correlator.trace_assembly import (
    ExchangeLinks,
    ProcessLinks,
    exchange_key,
    propagated_ids,
    view,
)

pytestmark = pytest.mark.unit
MS = 1_000_000


def span(
    span_id: str,
    side: str,
    start_ms: int,
    end_ms: int,
    *,
    pid: int = 100,
    tid: int = 100,
    client_port: int = 40000,
    server_port: int = 8000,
    seq: int | None = None,
    name: str = "GET /",
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    attrs = {
        names.ATTR_CLIENT_ADDRESS: "127.0.0.1",
        names.ATTR_CLIENT_PORT: str(client_port),
        names.ATTR_SERVER_ADDRESS: "127.0.0.1",
        names.ATTR_SERVER_PORT: str(server_port),
        names.ATTR_OBSERVATION_POINT: side.upper(),
        **(headers or {}),
    }
    if seq is not None:
        attrs[names.ATTR_TCP_REQUEST_SEQ] = str(seq)
    return {
        "span_id": span_id,
        "trace_id": f"trace-{span_id}",
        "node_id": "n1",
        "pid": pid,
        "tid": tid,
        "kind": f"http.{side}",
        "name": name,
        "start_ns": start_ms * MS,
        "end_ns": end_ms * MS,
        "attributes": attrs,
    }


def links(edges: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(e["parent_span_id"], e["child_span_id"], e["rule"]) for e in edges]


def add(linker: ExchangeLinks | ProcessLinks, *spans: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for s in spans:
        v = view(s)
        assert v is not None
        out += linker.add(v)
    return out


def test_the_exchange_key_is_the_same_at_both_ends_and_none_without_a_connection() -> None:
    client, server = span("c", "client", 0, 9), span("s", "server", 1, 8)
    assert exchange_key(client) == exchange_key(server) == "127.0.0.1:40000>127.0.0.1:8000"
    assert exchange_key({"attributes": {}}) is None
    assert view({**client, "kind": "file.open"}) is None


def test_propagated_ids_read_trace_ids_and_request_ids_and_skip_malformed_ones() -> None:
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    got = propagated_ids(
        {
            names.ATTR_HEADER_TRACEPARENT: tp,
            names.ATTR_HEADER_B3: "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1",
            names.ATTR_HEADER_REQUEST_ID: " req-42 ",
        }
    )
    assert got == (
        (names.TRACE_RULE_TRACEPARENT, "4bf92f3577b34da6a3ce929d0e0e4736"),
        (names.TRACE_RULE_B3, "80f198ee56343ba864fe8b2a57d3eff7"),
        (names.TRACE_RULE_REQUEST_ID, "req-42"),
    )
    bad = {names.ATTR_HEADER_TRACEPARENT: "00-" + "0" * 32 + "-00f067aa0ba902b7-01"}
    assert propagated_ids({**bad, names.ATTR_HEADER_B3: "zz"}) == ()
    assert propagated_ids({names.ATTR_HEADER_B3: "e457b5a2e4d86bd1"}) == (
        (names.TRACE_RULE_B3, "0" * 16 + "e457b5a2e4d86bd1"),
    )


@pytest.mark.parametrize("server_first", [True, False])
def test_client_and_server_of_one_exchange_join_by_sequence_number(server_first: bool) -> None:
    # Two requests on one keep-alive connection; the server's clock differs by 30 ms.
    c1 = span("c1", "client", 0, 10, pid=1, seq=1000)
    c2 = span("c2", "client", 20, 30, pid=1, seq=1050)
    s1 = span("s1", "server", 31, 38, pid=2, seq=1000)
    s2 = span("s2", "server", 51, 58, pid=2, seq=1050)
    order = [s1, s2, c1, c2] if server_first else [c1, c2, s1, s2]
    got = add(ExchangeLinks(), *order)
    assert sorted(links(got)) == [
        ("c1", "s1", names.TRACE_RULE_TCP_SEQ),
        ("c2", "s2", names.TRACE_RULE_TCP_SEQ),
    ]


def test_without_sequence_numbers_the_one_request_on_the_connection_at_that_time_joins() -> None:
    linker = ExchangeLinks()
    got = add(
        linker,
        span("c1", "client", 0, 10, pid=1),
        span("c2", "client", 20, 30, pid=1),
        span("s2", "server", 21, 29, pid=2),
        span("s1", "server", 1, 9, pid=2),
        span("other", "server", 2, 8, pid=2, name="POST /x"),  # not the same request
    )
    assert sorted(links(got)) == [
        ("c1", "s1", names.TRACE_RULE_CONNECTION),
        ("c2", "s2", names.TRACE_RULE_CONNECTION),
    ]


def test_a_thread_s_calls_inside_the_request_it_serves_are_its_children() -> None:
    linker = ProcessLinks()
    got = add(
        linker,
        span("db", "client", 2, 4, tid=7, server_port=5432, name="SELECT"),
        span("other-thread", "client", 3, 5, tid=8, server_port=6379),
        span("req", "server", 1, 10, tid=7),
        span("later", "client", 11, 12, tid=7, server_port=6379),  # after the answer
        span("up", "client", 5, 9, tid=7, server_port=9000),  # came after its parent
    )
    assert links(got) == [
        ("req", "db", names.TRACE_RULE_SAME_THREAD),
        ("req", "up", names.TRACE_RULE_SAME_THREAD),
    ]
    assert linker.counters[ta.LINKED] == 2


def test_a_thread_serving_two_requests_at_once_has_its_links_taken_back() -> None:
    linker = ProcessLinks()
    first = add(linker, span("call", "client", 3, 4, tid=1), span("short", "server", 2, 5, tid=1))
    assert links(first) == [("short", "call", names.TRACE_RULE_SAME_THREAD)]
    # A long request on the same thread that was open all along: the thread is an event loop.
    back = add(linker, span("long", "server", 1, 20, tid=1, client_port=40001))
    assert links(back) == [("", "call", names.TRACE_RULE_SAME_THREAD)]
    assert back[0]["edge_id"] == first[0]["edge_id"]  # replaces the link in the store
    assert add(linker, span("call2", "client", 6, 7, tid=1)) == []
    assert linker.counters[ta.MULTIPLEXED_THREADS] == 1


def test_propagated_ids_link_an_event_loop_s_calls_to_their_own_requests() -> None:
    def tp(trace: str, parent: str) -> dict[str, str]:
        return {names.ATTR_HEADER_TRACEPARENT: f"00-{trace * 32}-{parent * 16}-01"}

    linker = ProcessLinks()
    got = add(
        linker,
        span("a-call", "client", 3, 6, tid=1, server_port=9000, headers=tp("a", "1")),
        span("b-call", "client", 4, 7, tid=1, server_port=9000, headers=tp("b", "2")),
        span("a-req", "server", 1, 10, tid=1, client_port=1, headers=tp("a", "3")),
        span("b-req", "server", 2, 11, tid=1, client_port=2, headers=tp("b", "4")),
    )
    assert sorted(x for x in links(got) if x[2] == names.TRACE_RULE_TRACEPARENT) == [
        ("a-req", "a-call", names.TRACE_RULE_TRACEPARENT),
        ("b-req", "b-call", names.TRACE_RULE_TRACEPARENT),
    ]
    rid = {names.ATTR_HEADER_REQUEST_ID: "r-1"}
    more = add(
        linker,
        span("r-call", "client", 31, 32, tid=3, server_port=9000, headers=rid),
        span("r-req", "server", 30, 33, tid=2, client_port=3, headers=rid),
    )
    assert links(more) == [("r-req", "r-call", names.TRACE_RULE_REQUEST_ID)]


def test_spans_are_let_go_after_the_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ta, "HOLD_NS", 100 * MS)
    linker = ProcessLinks()
    add(linker, span("old-call", "client", 2, 3, tid=1))
    add(linker, span("much-later", "client", 500, 501, tid=2))
    linker.expire()
    assert linker.held_spans() == 1
    assert add(linker, span("req", "server", 1, 10, tid=1)) == []  # its child was let go
    exchanges = ExchangeLinks()
    add(exchanges, span("c", "client", 0, 10, seq=5), span("x", "client", 900, 901, seq=9))
    exchanges.expire()
    assert exchanges.held_spans() == 1


def test_an_event_loop_s_calls_are_linked_to_the_request_whose_task_made_them() -> None:
    def task(key: str) -> dict[str, str]:
        return {names.ATTR_ASYNC_TASK: key}

    linker = ProcessLinks()
    got = add(
        linker,
        span("a-call", "client", 3, 6, tid=1, server_port=9000, headers=task("7f00a0")),
        span("b-call", "client", 4, 7, tid=1, server_port=9000, headers=task("7f00b0")),
        span("no-task", "client", 5, 6, tid=1, server_port=9000, headers=task("0")),
        # a worker thread running in a context task a copied (asyncio.to_thread)
        span("a-pool", "client", 5, 8, tid=2, server_port=9000, headers=task("7f00a0")),
        span("a-req", "server", 1, 10, tid=1, client_port=1, headers=task("7f00a0")),
        span("b-req", "server", 2, 11, tid=1, client_port=2, headers=task("7f00b0")),
        # a later task given the freed task a's address: told apart by time
        span("c-call", "client", 21, 22, tid=1, server_port=9000, headers=task("7f00a0")),
        span("c-req", "server", 20, 25, tid=1, client_port=3, headers=task("7f00a0")),
    )
    assert sorted(x for x in links(got) if x[2] == names.TRACE_RULE_SAME_TASK) == [
        ("a-req", "a-call", names.TRACE_RULE_SAME_TASK),
        ("a-req", "a-pool", names.TRACE_RULE_SAME_TASK),
        ("b-req", "b-call", names.TRACE_RULE_SAME_TASK),
        ("c-req", "c-call", names.TRACE_RULE_SAME_TASK),
    ]


def test_keep_alive_requests_without_sequence_numbers_join_in_the_order_spans_end() -> None:
    # Each server span ends before its client span: s1, c1, s2, c2 is the order they come in.
    got = add(
        ExchangeLinks(),
        span("s1", "server", 1, 9, pid=2),
        span("c1", "client", 0, 10, pid=1),
        span("s2", "server", 12, 19, pid=2),
        span("c2", "client", 11, 20, pid=1),
    )
    assert sorted(links(got)) == [
        ("c1", "s1", names.TRACE_RULE_CONNECTION),
        ("c2", "s2", names.TRACE_RULE_CONNECTION),
    ]


def test_a_call_inside_two_requests_of_one_trace_is_not_given_to_either() -> None:
    rid = {names.ATTR_HEADER_REQUEST_ID: "same"}
    linker = ProcessLinks()
    first = add(
        linker,
        span("call", "client", 3, 4, tid=3, server_port=9000, headers=rid),
        span("req-a", "server", 1, 6, tid=1, client_port=1, headers=rid),
    )
    assert links(first) == [("req-a", "call", names.TRACE_RULE_REQUEST_ID)]
    # The sibling request that also holds it ends later: which one made the call is unknown.
    back = add(linker, span("req-b", "server", 2, 8, tid=2, client_port=2, headers=rid))
    assert links(back) == [("", "call", names.TRACE_RULE_REQUEST_ID)]
    assert linker.counters[ta.AMBIGUOUS] == 1


def test_a_span_that_ended_before_the_hold_is_counted_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ta, "HOLD_NS", 100 * MS)
    linker = ProcessLinks()
    add(linker, span("new", "client", 500, 501, tid=2))
    assert add(linker, span("old", "server", 1, 10, tid=1)) == []
    assert linker.counters[ta.LATE] == 1 and linker.held_spans() == 1
