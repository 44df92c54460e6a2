from __future__ import annotations

from typing import Any

from tests.unit.http_wire import CHAT_PATH, chat_delta, chunk, close, post, sock, sse
from zerotrace import names
from zerotrace.bus import Message
from zerotrace.clock import ManualClock
from zerotrace.codec import AvroCodec
from zerotrace.socket_batch import socket_batch_of, socket_data_of
from zerotrace_correlator.fileio_spans import file_open_span
from zerotrace_correlator.pipeline import CorrelatorStep


def raw_open(**over: Any) -> dict[str, Any]:
    base = {
        "event_id": "n1/42/43/1000/open",
        "node_id": "n1",
        "pid": 42,
        "tid": 43,
        "process_name": "python3",
        "container_id": None,
        "cgroup_id": 9,
        "op": "OPEN",
        "path": "/etc/hosts",
        "result": 3,
        "flags": 0,
        "start_ns": 1000,
        "end_ns": 1500,
    }
    return {**base, **over}


def message(value: bytes, offset: int = 0) -> Message:
    return Message(names.RAW_FILEIO.name, 0, offset, b"42", value, 5)


def test_open_becomes_a_span_with_deterministic_ids() -> None:
    a, b = file_open_span(raw_open()), file_open_span(raw_open())
    assert a == b
    assert a["kind"] == names.SPAN_KIND_FILE_OPEN
    assert a["name"] == "open /etc/hosts"
    assert a["status"] == "OK"
    assert a["attributes"][names.ATTR_FILE_PATH] == "/etc/hosts"
    assert a["attributes"]["file.fd"] == "3"
    assert len(a["span_id"]) == 16 and len(a["trace_id"]) == 32
    assert file_open_span(raw_open(event_id="other"))["span_id"] != a["span_id"]


def test_failed_open_is_an_error_span_with_the_errno_name() -> None:
    span = file_open_span(raw_open(result=-2))
    assert span["status"] == "ERROR"
    assert span["attributes"][names.ATTR_ERROR_TYPE] == "ENOENT"


def test_step_turns_raw_into_derived_and_poison_into_a_dead_letter(codec: AvroCodec) -> None:
    step = CorrelatorStep(codec)
    [good] = step.process(message(codec.encode(names.RAW_FILEIO.record, raw_open())))
    assert good.topic == names.DERIVED_SPAN.name
    record, span = codec.decode(good.value)
    assert record == names.DERIVED_SPAN.record and span["pid"] == 42

    [bad] = step.process(message(b"\x00garbage", offset=1))
    assert bad.topic == names.DEAD_LETTER.name
    _record, letter = codec.decode(bad.value)
    assert letter["source_offset"] == 1 and letter["value"] == b"\x00garbage"
    assert "not an Avro single-object message" in letter["reason"]
    assert letter["ts_ns"] == 5 * 1_000_000  # the message's own time: no clock is read

    wrong = codec.encode(
        names.DERIVED_TRACE.record,
        {
            "edge_id": "e",
            "trace_id": "t",
            "parent_span_id": "p",
            "child_span_id": "c",
            "rule": "r",
            "ts_ns": 1,
        },
    )
    [misplaced] = step.process(message(wrong, offset=2))
    assert misplaced.topic == names.DEAD_LETTER.name
    counters = step.counters()
    assert (counters["consumed"], counters["produced"], counters["dead_letters"]) == (3, 1, 2)


def test_tick_moves_time_only_on_a_quiet_input(codec: AvroCodec) -> None:
    from zerotrace_correlator.pipeline import TICK_LAG_NS

    clock = ManualClock(10 * TICK_LAG_NS)
    step = CorrelatorStep(codec)
    step.process(message(codec.encode(names.RAW_FILEIO.record, raw_open())))
    assert step.tick(clock.now_ns()) == []  # a record came since the previous tick
    clock.advance(TICK_LAG_NS // 2)
    assert step.tick(clock.now_ns()) == [] and step._event_time_ns == 0  # quiet, not for long
    clock.advance(TICK_LAG_NS)
    step.tick(clock.now_ns())
    assert step._event_time_ns == clock.now_ns() - TICK_LAG_NS


def test_a_socket_batch_derives_what_its_calls_would_one_by_one(codec: AvroCodec) -> None:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    wire = [post(CHAT_PATH, {"model": "m", "stream": True}), head]
    wire += [chunk(sse(chat_delta(f"t{i}"))) for i in range(3)]
    wire += [chunk(sse(chat_delta("", finish="stop"))), chunk(sse("[DONE]")), b"0\r\n\r\n"]
    calls = [
        sock("EGRESS" if i == 0 else "INGRESS", piece, 1_000_000 * (i + 1))
        for i, piece in enumerate(wire)
    ]
    batch = socket_batch_of(calls)
    singles = socket_data_of(batch)  # the same calls, with the ids a batch's calls get

    def derived(values: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
        step = CorrelatorStep(codec)
        outputs = []
        for offset, (record, datum) in enumerate(values):
            outputs += step.process(message(codec.encode(record, datum), offset))
        outputs += step.flush()
        return [codec.decode(out.value) for out in outputs]

    end = (names.RAW_CONN.record, close(20_000_000))
    one_by_one = derived([*[(names.RAW_SOCKET.record, s) for s in singles], end])
    batched = derived([(names.SOCKET_BATCH_RECORD, batch), end])
    assert [record for record, _ in batched] == [
        names.DERIVED_SPAN.record,
        names.DERIVED_LLM.record,
    ]
    assert batched == one_by_one
