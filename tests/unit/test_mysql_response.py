"""mysql_response.py: which packets make up the response to each kind of command, in both EOF
modes and in the mode not yet known. Packets come from test_mysql_wire.py's builders."""

from __future__ import annotations

import pytest

from tests.unit.test_mysql_wire import (
    CURSOR_EXISTS,
    MORE_RESULTS,
    binary_row,
    collect,
    column_def,
    eof,
    err,
    lenenc_int,
    ok,
    ok_eof,
    prepare_ok,
    resultset,
    text_row,
)
from zerotrace_correlator.mysql_response import (
    MAX_COLUMNS,
    SHAPES,
    EofMode,
    Response,
    Shape,
    Verdict,
)
from zerotrace_correlator.mysql_wire import Packet, PacketReader

pytestmark = pytest.mark.unit

MORE, DONE, BEFORE = Verdict.MORE, Verdict.DONE, Verdict.ENDED_BEFORE


def read(response: Response, mode: EofMode, *payloads: bytes) -> list[Verdict]:
    return [response.read(Packet(1, len(p), p, 0), mode) for p in payloads]


def read_wire(response: Response, mode: EofMode, data: bytes) -> list[Verdict]:
    packets: list[Packet] = []
    PacketReader().feed(data, 0, 0, collect(packets))
    return [response.read(p, mode) for p in packets]


@pytest.mark.parametrize("deprecate", [False, True, None])
def test_a_text_resultset_counts_its_rows_in_either_eof_mode(deprecate: bool | None) -> None:
    mode = EofMode(deprecate)
    wire_bytes = resultset(["id", "name"], [text_row(b"1", b"ann"), text_row(b"2", None)],
                           deprecate_eof=bool(deprecate))  # fmt: skip
    response = Response(Shape.RESULTS)
    verdicts = read_wire(response, mode, wire_bytes)
    assert verdicts[-1] is DONE and set(verdicts[:-1]) == {MORE}
    assert (response.rows, response.error, response.bytes) == (2, None, len(wire_bytes))
    assert mode.deprecated is bool(deprecate)  # learnt when not known


@pytest.mark.parametrize("deprecate", [False, True])
def test_an_empty_resultset_tells_the_eof_mode_too(deprecate: bool) -> None:
    mode = EofMode()
    response = Response(Shape.RESULTS)
    assert read_wire(response, mode, resultset(["a"], [], deprecate_eof=deprecate))[-1] is DONE
    assert response.rows == 0 and mode.deprecated is deprecate


def test_ok_and_err_end_a_query_and_the_ok_counts_changed_rows() -> None:
    response = Response(Shape.RESULTS)
    assert read(response, EofMode(), ok(affected=3)) == [DONE]
    assert (response.rows, response.affected) == (-1, 3)
    failed = Response(Shape.RESULTS)
    assert read(failed, EofMode(), err(1064, "42000", "syntax")) == [DONE]
    assert failed.error is not None and failed.error.code == 1064


def test_more_results_keep_the_response_open_through_each_result() -> None:
    response = Response(Shape.RESULTS)
    verdicts = read(
        response, EofMode(False),
        ok(affected=1, status=MORE_RESULTS), lenenc_int(1), column_def("a"), eof(),
        text_row(b"x"), eof(status=MORE_RESULTS), ok(affected=2),
    )  # fmt: skip
    assert verdicts == [MORE] * 6 + [DONE]
    assert (response.rows, response.affected) == (1, 3)


def test_an_error_in_the_middle_of_the_rows_ends_the_response() -> None:
    response = Response(Shape.RESULTS)
    verdicts = read(response, EofMode(True), lenenc_int(1), column_def("a"), text_row(b"x"),
                    err(1317, "70100", "Query execution was interrupted"))  # fmt: skip
    assert verdicts == [MORE, MORE, MORE, DONE]
    assert response.rows == 1 and response.error is not None and response.error.code == 1317


def test_local_infile_waits_for_the_ok_after_the_file() -> None:
    response = Response(Shape.RESULTS)
    assert read(response, EofMode(), b"\xfb/tmp/data.csv", ok(affected=10)) == [MORE, DONE]


def test_a_cursor_s_execute_ends_after_the_definitions_and_fetch_reads_rows() -> None:
    execute = Response(Shape.RESULTS)
    verdicts = read(execute, EofMode(False), lenenc_int(1), column_def("n"),
                    eof(status=CURSOR_EXISTS | 2))  # fmt: skip
    assert verdicts == [MORE, MORE, DONE] and execute.rows == 0
    fetch = Response(Shape.FETCH)
    verdicts = read(fetch, EofMode(False), binary_row(1), binary_row(2), eof())
    assert verdicts == [MORE, MORE, DONE] and fetch.rows == 2


def test_definitions_skipped_by_optional_metadata_go_straight_to_the_rows() -> None:
    for mode, end in ((EofMode(False), eof()), (EofMode(True), ok_eof())):
        response = Response(Shape.RESULTS)
        payloads = [b"\x02\x00"] + ([eof()] if mode.deprecated is False else [])
        verdicts = read(response, mode, *payloads, text_row(b"1", b"2"), end)
        assert verdicts[-1] is DONE and response.rows == 1


def test_a_row_that_starts_like_an_eof_but_is_16_mib_is_a_row() -> None:
    response = Response(Shape.RESULTS)
    read(response, EofMode(True), lenenc_int(1), column_def("blob"))
    huge = Packet(2, 0xFFFFFF + 20, b"\xfe" + bytes(8), 0)  # a lenenc of 8 bytes: a long value
    assert response.read(huge, EofMode(True)) is MORE and response.rows == 1


@pytest.mark.parametrize("deprecate", [False, True])
def test_a_prepare_reads_its_parameter_and_column_blocks(deprecate: bool) -> None:
    mode = EofMode(deprecate)
    payloads = [prepare_ok(9, columns=2, params=1), column_def("?")]
    payloads += [] if deprecate else [eof()]
    payloads += [column_def("a"), column_def("b")] + ([] if deprecate else [eof()])
    response = Response(Shape.PREPARE)
    assert read(response, mode, *payloads) == [MORE] * (len(payloads) - 1) + [DONE]
    assert response.statement == 9 and not response.may_have_ended


def test_a_prepare_without_definitions_is_its_ok_alone() -> None:
    for payload in (prepare_ok(3, 0, 0), prepare_ok(3, 2, 2, metadata=False)):
        response = Response(Shape.PREPARE)
        assert read(response, EofMode(), payload) == [DONE] and response.statement == 3


def test_a_prepare_in_an_unknown_mode_ends_before_a_packet_that_is_not_its_eof() -> None:
    mode = EofMode()
    response = Response(Shape.PREPARE)
    verdicts = read(response, mode, prepare_ok(4, columns=1, params=0), column_def("a"))
    assert verdicts == [MORE, MORE] and response.may_have_ended
    assert read(response, mode, ok()) == [BEFORE] and mode.deprecated is True
    with_eof = Response(Shape.PREPARE)
    assert read(with_eof, EofMode(), prepare_ok(4, 1, 0), column_def("a"), eof())[-1] is DONE


def test_a_prepare_in_an_unknown_mode_learns_it_between_its_blocks() -> None:
    mode = EofMode()
    response = Response(Shape.PREPARE)
    verdicts = read(response, mode, prepare_ok(5, columns=1, params=1), column_def("?"),
                    column_def("a"))  # fmt: skip
    assert verdicts == [MORE, MORE, DONE] and mode.deprecated is True


def test_a_malformed_prepare_ok_ends_the_response_marked() -> None:
    response = Response(Shape.PREPARE)
    assert read(response, EofMode(), b"\x00\x01") == [DONE] and response.malformed


def test_field_list_reads_definitions_until_eof() -> None:
    response = Response(Shape.FIELDS)
    assert read(response, EofMode(), column_def("a"), column_def("b"), eof()) == [MORE, MORE, DONE]


def test_auth_goes_on_through_switches_and_more_data_until_ok_or_err() -> None:
    switch = b"\xfecaching_sha2_password\0" + bytes(20) + b"\0"
    response = Response(Shape.AUTH)
    assert read(response, EofMode(), switch, b"\x01\x04", b"\x01-----BEGIN KEY", ok()) == [
        MORE, MORE, MORE, DONE
    ]  # fmt: skip
    denied = Response(Shape.AUTH)
    assert read(denied, EofMode(), switch, err(1045, "28000", "Access denied")) == [MORE, DONE]


def test_simple_commands_take_one_packet_of_any_kind() -> None:
    for payload in (ok(), eof(), b"Uptime: 5  Threads: 1", err(1094, "HY000", "Unknown thread")):
        assert read(Response(Shape.SIMPLE), EofMode(), payload) == [DONE]


def test_mariadb_progress_reports_are_not_errors() -> None:
    response = Response(Shape.RESULTS)
    progress = b"\xff\xff\xff\x01\x01\x02\x00\x10\x27\x00\x00\x05stage"
    assert read(response, EofMode(), progress, ok()) == [Verdict.PROGRESS, DONE]
    assert response.error is None


def test_a_column_count_that_is_not_one_breaks_the_response() -> None:
    for payload in (b"\xfe" + (MAX_COLUMNS + 1).to_bytes(8, "little"), b"\x03\x00\x00"):
        response = Response(Shape.RESULTS)
        assert read(response, EofMode(), payload) == [Verdict.BROKEN]
        assert response.broken.startswith("not a resultset's column count")


def test_every_command_with_a_special_response_has_its_shape() -> None:
    assert SHAPES[0x03] is Shape.RESULTS and SHAPES[0x16] is Shape.PREPARE
    assert SHAPES[0x19] is Shape.NONE and SHAPES[0x01] is Shape.NONE
    assert SHAPES.get(0x0E, Shape.SIMPLE) is Shape.SIMPLE
