"""span_timings.py: phases, connection set-up (connect, TLS, DNS join) and file I/O on spans."""

from __future__ import annotations

from typing import Any

from zerotrace import names
from zerotrace.codec import AvroCodec
from zerotrace_correlator import span_timings as st
from zerotrace_correlator.pipeline import CorrelatorStep
from zerotrace_correlator.span_timings import (
    TAG_KV_CACHE,
    TAG_MODEL,
    FileDirs,
    SpanTimings,
    phase_attributes,
)

MS = 1_000_000


def conn(
    kind: str, conn_id: str = "c1", ts_ns: int = 0, duration_ns: int = 0, **kw: Any
) -> dict[str, Any]:
    return {
        "kind": kind,
        "conn_id": conn_id,
        "pid": 7,
        "ts_ns": ts_ns,
        "duration_ns": duration_ns,
        **kw,
    }


def span(
    start_ns: int, end_ns: int, pid: int = 7, tid: int = 8, kind: str = "http.server", **attrs: str
) -> dict[str, Any]:
    return {
        "pid": pid,
        "tid": tid,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "kind": kind,
        "attributes": dict(attrs),
    }


def dns(start_ns: int, end_ns: int, name: str, answers: str, pid: int = 7) -> dict[str, Any]:
    lookup = span(start_ns, end_ns, pid=pid, kind=st.DNS_CLIENT_KIND)
    lookup["attributes"] = {names.ATTR_DNS_QUESTION_NAME: name, names.ATTR_DNS_ANSWERS: answers}
    return lookup


def fileop(
    op: str, start_ns: int, end_ns: int, size: int, path: str, tid: int = 8
) -> dict[str, Any]:
    return {
        "op": op,
        "pid": 7,
        "tid": tid,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "result": size,
        "path": path,
    }


def test_phases_split_an_exchange_at_its_byte_times() -> None:
    assert phase_attributes(100, 130, 1130, 1500) == {
        names.ATTR_REQUEST_SEND_DURATION: "30",
        names.ATTR_SERVER_DURATION: "1000",
        names.ATTR_RESPONSE_TRANSFER_DURATION: "370",
    }


def test_connect_and_tls_go_on_the_first_span_of_the_connection_only() -> None:
    timings = SpanTimings()
    timings.on_conn(conn("CONNECT", ts_ns=50 * MS, duration_ns=3 * MS, remote_addr="10.0.0.1"))
    timings.on_conn(conn("TLS_HANDSHAKE", ts_ns=60 * MS, duration_ns=5 * MS))
    timings.on_conn(conn("CLOSE", ts_ns=99 * MS))  # not a timing
    first, second = span(70 * MS, 80 * MS), span(81 * MS, 90 * MS)
    timings.annotate("c1", first, server=False)
    timings.annotate("c1", second, server=False)
    assert first["attributes"] == {
        names.ATTR_CONNECT_DURATION: str(3 * MS),
        names.ATTR_TLS_HANDSHAKE_DURATION: str(5 * MS),
    }
    assert second["attributes"] == {}


def test_dns_joins_the_resolution_of_the_connected_address_just_before_the_connect() -> None:
    timings = SpanTimings()
    # getaddrinfo asks A and AAAA together; the answer with the peer's address is one of them.
    timings.on_span(dns(10 * MS, 14 * MS, "api.example", "10.0.0.1"))
    timings.on_span(dns(10 * MS + 5, 17 * MS, "api.example", "fd00::1"))
    timings.on_span(dns(11 * MS, 12 * MS, "other.example", "10.0.0.9"))
    timings.on_span(dns(11 * MS, 12 * MS, "api.example", "10.0.0.1", pid=99))  # another process
    timings.on_conn(conn("CONNECT", ts_ns=21 * MS, duration_ns=2 * MS, remote_addr="10.0.0.1"))
    first = span(30 * MS, 40 * MS)
    timings.annotate("c1", first, server=False)
    assert first["attributes"][names.ATTR_DNS_DURATION] == str(7 * MS)
    assert first["attributes"][names.ATTR_DNS_RESOLVED_NAME] == "api.example"


def test_dns_not_joined_when_the_address_differs_it_ended_late_or_long_before() -> None:
    for lookup, remote in (
        (dns(10 * MS, 14 * MS, "a.example", "10.0.0.2"), "10.0.0.1"),  # another address
        (dns(10 * MS, 30 * MS, "a.example", "10.0.0.1"), "10.0.0.1"),  # ended after the connect
        (dns(0, 1, "a.example", "10.0.0.1"), "10.0.0.1"),  # too long before (window)
    ):
        timings = SpanTimings()
        timings.on_span(lookup)
        start = 1 + st.DNS_WINDOW_NS + 19 * MS if lookup["end_ns"] == 1 else 19 * MS
        timings.on_conn(conn("CONNECT", ts_ns=start + MS, duration_ns=MS, remote_addr=remote))
        first = span(start + 2 * MS, start + 3 * MS)
        timings.annotate("c1", first, server=False)
        assert names.ATTR_DNS_DURATION not in first["attributes"]
        assert first["attributes"][names.ATTR_CONNECT_DURATION] == str(MS)


def test_dns_matches_an_ipv4_mapped_peer() -> None:
    found = st.resolution_before(
        [st.DnsLookup(7, 0, 5, "a.example", frozenset({"10.0.0.1"}))], "::ffff:10.0.0.1", 10
    )
    assert found == ("a.example", 0, 5)


def test_server_span_gets_its_threads_file_io_inside_it_tagged_by_directory() -> None:
    timings = SpanTimings(FileDirs.parse("/var/kv:/tmp/kv2", "/models/"))
    ops = [
        fileop("READ", 10 * MS, 11 * MS, 4096, "/models/llama/w.bin"),
        fileop(
            "READ", 12 * MS, 12 * MS + 500, 0, "/models/llama/w.bin"
        ),  # EOF read: its time counts
        fileop("WRITE", 13 * MS, 15 * MS, 100, "/var/kv/block7"),
        fileop("READ", 13 * MS, 14 * MS, 50, "/etc/hosts"),
        fileop("READ", 13 * MS, 14 * MS, 999, "/models/x", tid=9),  # another thread
        fileop("READ", 5 * MS, 6 * MS, 999, "/models/x"),  # before the span
        fileop("READ", 19 * MS, 21 * MS, 999, "/models/x"),  # ends after it
    ]
    assert [timings.on_file(op) for op in ops] == [True] * len(ops)
    assert timings.on_file(fileop("OPEN", 1, 2, 3, "/x")) is False
    server = span(9 * MS, 20 * MS)
    timings.annotate("c9", server, server=True)
    assert server["attributes"] == {
        names.ATTR_FILE_READ_BYTES: "4146",
        names.ATTR_FILE_READ_DURATION: str(2 * MS + 500),
        names.ATTR_FILE_READ_CALLS: "3",
        names.ATTR_FILE_WRITE_BYTES: "100",
        names.ATTR_FILE_WRITE_DURATION: str(2 * MS),
        names.ATTR_FILE_WRITE_CALLS: "1",
        names.ATTR_FILE_PATHS: "/models/llama/w.bin,/var/kv/block7,/etc/hosts",
        names.ATTR_FILE_KV_CACHE_BYTES: "100",
        names.ATTR_FILE_MODEL_BYTES: "4096",
        names.ATTR_FILE_TAGS: "kv_cache,model",
    }
    client = span(9 * MS, 20 * MS)
    timings.annotate("c10", client, server=False)
    assert client["attributes"] == {}


def test_file_dirs_tag_only_paths_under_them() -> None:
    dirs = FileDirs.parse("/kv", "/m:relative/ignored")
    assert dirs.model == ("/m",)
    assert dirs.tag("/kv") == TAG_KV_CACHE
    assert dirs.tag("/kv/../m/a") == TAG_MODEL
    assert dirs.tag("/kvx/a") is None
    assert dirs.tag("kv/a") is None


def test_memory_is_bounded_and_drops_are_counted(monkeypatch: Any) -> None:
    monkeypatch.setattr(st, "MAX_OPS_PER_THREAD", 3)
    monkeypatch.setattr(st, "MAX_DNS_PER_PID", 2)
    monkeypatch.setattr(st, "MAX_CONNECTIONS", 2)
    timings = SpanTimings()
    for i in range(5):
        timings.on_file(fileop("READ", i * MS, i * MS + 1, 1, "/f"))
        timings.on_span(dns(i, i + 1, "n", "10.0.0.1"))
        timings.on_conn(conn("CONNECT", conn_id=f"c{i}", ts_ns=i))
    assert timings.counters == {
        st.FILE_OPS_DROPPED: 2,
        st.DNS_SPANS_DROPPED: 3,
        st.SETUPS_DROPPED: 3,
    }
    server = span(0, 10 * MS)
    timings.annotate("c4", server, server=True)
    assert server["attributes"][names.ATTR_FILE_READ_CALLS] == "3"


def test_setup_read_after_the_first_span_makes_it_again_with_the_same_id() -> None:
    timings = SpanTimings()
    first = span(70 * MS, 80 * MS) | {"span_id": "s1"}
    timings.annotate("c1", first, server=False)
    again = timings.on_conn(conn("CONNECT", ts_ns=50 * MS, duration_ns=3 * MS))
    assert [s["span_id"] for s in again] == ["s1"]
    assert again[0]["attributes"] == {names.ATTR_CONNECT_DURATION: str(3 * MS)}
    (tls,) = timings.on_conn(conn("TLS_HANDSHAKE", ts_ns=60 * MS, duration_ns=5 * MS))
    assert tls["attributes"] == {
        names.ATTR_CONNECT_DURATION: str(3 * MS),
        names.ATTR_TLS_HANDSHAKE_DURATION: str(5 * MS),
    }
    # Kept only LATE_NS past its end: a CONNECT later than that waits for a next span.
    late = conn("CONNECT", conn_id="c2", ts_ns=90 * MS + st.LATE_NS, duration_ns=MS)
    timings.annotate("c2", span(80 * MS, 90 * MS) | {"span_id": "s2"}, server=False)
    assert timings.on_conn(late) == []


def test_a_non_blocking_connect_takes_its_time_from_established_in_either_order() -> None:
    # CONNECT returned EINPROGRESS at once (duration 0: not a connect time); ESTABLISHED has it.
    for order in (("CONNECT", "ESTABLISHED"), ("ESTABLISHED", "CONNECT")):
        timings = SpanTimings()
        timings.on_span(dns(10 * MS, 14 * MS, "api.example", "10.0.0.1"))
        records = {
            "CONNECT": conn("CONNECT", ts_ns=20 * MS, remote_addr="10.0.0.1"),
            "ESTABLISHED": conn(
                "ESTABLISHED", ts_ns=27 * MS, duration_ns=7 * MS, remote_addr="10.0.0.1"
            ),
        }
        for kind in order:
            assert timings.on_conn(records[kind]) == []
        first = span(30 * MS, 40 * MS)
        timings.annotate("c1", first, server=False)
        assert first["attributes"] == {
            names.ATTR_CONNECT_DURATION: str(7 * MS),
            names.ATTR_DNS_DURATION: str(4 * MS),
            names.ATTR_DNS_RESOLVED_NAME: "api.example",
        }, order


def test_a_non_blocking_connect_without_established_gets_no_connect_time() -> None:
    timings = SpanTimings()
    timings.on_span(dns(10 * MS, 14 * MS, "api.example", "10.0.0.1"))
    timings.on_conn(conn("CONNECT", ts_ns=20 * MS, remote_addr="10.0.0.1"))
    first = span(30 * MS, 40 * MS)
    timings.annotate("c1", first, server=False)
    assert first["attributes"] == {
        names.ATTR_DNS_DURATION: str(4 * MS),
        names.ATTR_DNS_RESOLVED_NAME: "api.example",
    }


def test_established_read_after_the_first_span_makes_it_again() -> None:
    timings = SpanTimings()
    timings.on_conn(conn("CONNECT", ts_ns=20 * MS))
    first = span(30 * MS, 40 * MS) | {"span_id": "s1"}
    timings.annotate("c1", first, server=False)
    assert names.ATTR_CONNECT_DURATION not in first["attributes"]
    (again,) = timings.on_conn(conn("ESTABLISHED", ts_ns=27 * MS, duration_ns=7 * MS))
    assert again["span_id"] == "s1"
    assert again["attributes"] == {names.ATTR_CONNECT_DURATION: str(7 * MS)}
    # Its CONNECT read after both adds nothing: the span is not made a third time.
    timings = SpanTimings()
    timings.annotate("c1", span(30 * MS, 40 * MS) | {"span_id": "s1"}, server=False)
    assert len(timings.on_conn(conn("ESTABLISHED", ts_ns=27 * MS, duration_ns=7 * MS))) == 1
    assert timings.on_conn(conn("CONNECT", ts_ns=20 * MS)) == []


def test_file_calls_read_after_their_server_span_make_it_again_once() -> None:
    timings = SpanTimings()
    server = span(10 * MS, 20 * MS) | {"span_id": "s1"}
    timings.annotate("c1", server, server=True)
    assert server["attributes"] == {}
    assert timings.late_spans() == []
    for i in range(3):
        timings.on_file(fileop("READ", (11 + i) * MS, (11 + i) * MS + 100, 10, "/f"))
    timings.on_file(fileop("READ", 25 * MS, 26 * MS, 10, "/f"))  # after the span: not it
    (again,) = timings.late_spans()
    assert again["span_id"] == "s1"
    assert again["attributes"][names.ATTR_FILE_READ_BYTES] == "30"
    assert again["attributes"][names.ATTR_FILE_READ_CALLS] == "3"
    assert timings.late_spans() == []


def test_reads_and_writes_are_no_spans_of_their_own_opens_are(codec: AvroCodec) -> None:
    step = CorrelatorStep(codec)
    raw = {
        "event_id": "e1",
        "node_id": "n",
        "pid": 7,
        "tid": 8,
        "process_name": "srv",
        "container_id": None,
        "cgroup_id": 1,
        "path": "/f",
        "result": 5,
        "flags": 0,
        "start_ns": 1,
        "end_ns": 2,
    }
    assert step.process_record(names.RAW_FILEIO.record, raw | {"op": "READ"}) == []
    assert step.process_record(names.RAW_FILEIO.record, raw | {"op": "WRITE"}) == []
    (opened,) = step.process_record(names.RAW_FILEIO.record, raw | {"op": "OPEN"})
    assert opened.topic == names.DERIVED_SPAN.name
